//! Handing a run over to training-data-attribution tools (SOURCE, TracIn) and to
//! Hugging Face: `lavenderd export` and `lavenderd resolve`, as plain functions.
//!
//! [`export`] turns a run's checkpoints into `checkpoint-<step>/` directories that
//! `GPT2LMHeadModel.from_pretrained` and `AutoTokenizer.from_pretrained` load, each
//! carrying that checkpoint's optimizer moments bitwise and a Hugging Face
//! `trainer_state.json` whose `log_history` has every step's learning rate.
//! [`resolve`] fills what an attribution config leaves unset (model path, momentum,
//! per-step learning rates) from the run that produced the checkpoints, and
//! computes lr×steps per segment. Nothing here needs libtorch.

mod error;
mod exporter;
mod hf_config;
mod hf_state;
mod history;
mod output;
mod resolve;
mod run_config;
mod segments;
mod staging;
mod step;
mod tensors;

pub use error::ExportError;
pub use exporter::{
    EXPORT_DIR, EXPORT_MARKER, ExportOptions, ExportReport, ExportStatus, ExportedCheckpoint,
    Selection, export, locate_run,
};
pub use hf_config::{ModelDims, SpecialTokens, model_dims};
pub use history::LogHistory;
pub use output::{export_json, export_text, resolve_json, resolve_text};
pub use resolve::{
    Field, ResolveOptions, Resolved, ResolvedCheckpoint, Sources, parse_lr_list, resolve,
};
pub use run_config::RunConfig;
pub use segments::{Segment, lr_x_steps, terminal_velocity_factor};
pub use step::{checkpoint_step, step_from_name};

pub type Result<T, E = ExportError> = std::result::Result<T, E>;
