//! The names of the files and folders a run's exports are made of, and of the run
//! config beside them: every module here reads or writes them, so they sit below all.

/// Default export directory inside a run: `<run>/exported/checkpoint-<step>/`.
pub const EXPORT_DIR: &str = "exported";
/// Default directory of the moving-average weights' exports (`--ema`).
pub const EXPORT_EMA_DIR: &str = "exported-ema";
/// The run's config for attribution tools (`<run>/config.yaml`, [`crate::run_config`]).
pub const CONFIG_FILE: &str = "config.yaml";

pub const CONFIG_JSON: &str = "config.json";
pub const GENERATION_CONFIG_JSON: &str = "generation_config.json";
pub const TOKENIZER_JSON: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG_JSON: &str = "tokenizer_config.json";

pub const MODEL_FILE: &str = "model.safetensors";
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// The weights' moving average (`training.ema`): the same names and layout as the
/// weights, so it exports as a model.
pub const EMA_FILE: &str = "ema.safetensors";
/// `optimizer.pt` beside `optimizer.safetensors`: the same moments in torch.optim
/// AdamW's `state_dict()` layout, which attribution tools load with `torch.load`.
pub const OPTIMIZER_PT: &str = "optimizer.pt";
