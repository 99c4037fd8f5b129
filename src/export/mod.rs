//! Handing a run over to training-data-attribution tools (SOURCE, TracIn) and to
//! Hugging Face: `lavenderd export` and `lavenderd resolve`, as plain functions.
//!
//! [`export`] turns a run's checkpoints into `checkpoint-<step>/` directories that
//! `GPT2LMHeadModel.from_pretrained` and `AutoTokenizer.from_pretrained` load, each
//! carrying that checkpoint's optimizer moments bitwise (`optimizer.safetensors`)
//! and as torch.optim's `state_dict()` (`optimizer.pt`, written without libtorch),
//! and a Hugging Face `trainer_state.json` whose `log_history` has every step's
//! learning rate, on every entry.
//! [`resolve`] makes a bergson SOURCE config (`approx_unrolling_cfg`) for exported
//! checkpoints, filling what it leaves unset (per-segment `lr_list` and
//! `step_size_list`, `momentum` in SOURCE's sense, `use_adam_preconditioner`)
//! from the run that produced them. Nothing here needs libtorch.

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
mod torch_load;
mod torch_save;

pub use crate::checkpoint::EXPORT_MARKER;
pub use error::ExportError;
pub use exporter::{
    Carried, EXPORT_DIR, EXPORT_EMA_DIR, ExportOptions, ExportReport, ExportStatus,
    ExportedCheckpoint, Selection, export, locate_run,
};
pub use hf_config::{ModelDims, SpecialTokens, model_dims};
pub use history::{LogHistory, for_hf_readers};
pub use output::{export_json, export_text, resolve_json, resolve_yaml, yaml_float};
pub use resolve::{
    Field, ResolveOptions, Resolved, ResolvedCheckpoint, Sources, parse_list, resolve,
};
pub use run_config::{RunConfig, run_config_yaml};
pub use segments::{Segment, terminal_velocity_factor};
pub use step::{checkpoint_step, step_from_name};
pub use tensors::{EMA_FILE, OPTIMIZER_PT, hf_parameter_order};
pub use torch_load::{LoadedTensor, load_state_dict};
pub use torch_save::Dtype as TorchDtype;

pub type Result<T, E = ExportError> = std::result::Result<T, E>;
