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
//! from the run that produced them. [`attribute`] runs bergson's SOURCE over the
//! exports and ranks a run's training documents per query (`lavenderd attribute`,
//! with a Python helper). Nothing here needs libtorch.

pub mod attribute;
mod error;
mod exporter;
mod hf_config;
mod hf_state;
mod history;
mod names;
mod output;
mod resolve;
mod run_config;
mod segments;
mod staging;
mod step;
mod tensors;
mod torch_load;
mod torch_save;
mod yaml;

pub use error::{ExportError, Result};
pub use exporter::{
    Carried, ExportOptions, ExportReport, ExportStatus, ExportedCheckpoint, Selection, export,
    locate_run,
};
pub use hf_config::{ModelDims, SpecialTokens, model_dims};
pub use history::{LogHistory, for_hf_readers};
pub use lavender::checkpoint::EXPORT_MARKER;
pub use names::{CONFIG_FILE, EMA_FILE, EXPORT_DIR, EXPORT_EMA_DIR, OPTIMIZER_PT};
pub use output::{export_json, export_text, resolve_json, resolve_yaml};
pub use resolve::{
    Field, ResolveOptions, Resolved, ResolvedCheckpoint, Sources, parse_list, resolve,
};
pub use run_config::{RunConfig, run_config_yaml};
pub use segments::{Segment, terminal_velocity_factor};
pub use step::{checkpoint_step, step_from_name};
pub use tensors::hf_parameter_order;
pub use torch_load::{LoadedTensor, load_state_dict};
pub use torch_save::Dtype as TorchDtype;
pub use yaml::yaml_float;
