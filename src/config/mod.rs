//! The pipeline config: YAML layered as built-in defaults < file < environment
//! (`LAVENDER_*`) < command-line overrides, then validated.
//!
//! The defaults are `configs/default.yaml`, embedded as [`DEFAULT_YAML`]. Every error
//! says where the bad value came from (`file:line:col`, the environment variable, or
//! the override), its key path, and what to do.

mod api;
mod de;
mod diff;
mod error;
mod launch;
mod layers;
mod logging;
mod notify;
mod origins;
mod paths;
mod replicate;
mod scale;
mod sections;
mod source;
mod supervision;
mod tracking;
mod tree;
mod validate;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::LazyLock;

pub use crate::data_root::DATA_ROOT_VAR;
/// The element of the config's `steps:` list; defined with its table in `pipeline_step`.
pub use crate::pipeline_step::PipelineStep;
pub use api::{ApiConfig, HostPort};
pub use diff::changed_keys;
pub use error::{ConfigError, ConfigErrorKind, Origin};
pub use launch::{LaunchBackend, LaunchConfig, NodeFailurePolicy, SlurmConfig};
pub use layers::LoadOptions;
pub use logging::{LoggingConfig, MIN_MAX_BYTES};
pub use notify::{
    BarkConfig, DeadmanConfig, NotifyConfig, NtfyConfig, WebhookConfig, WebhookFormat,
};
pub use origins::{ConfigOrigins, ORIGINS_VAR};
pub use paths::{MissingPath, PATH_KEYS, missing_paths};
pub use replicate::{ReplicateConfig, Target as ReplicateTarget, valid_lineage};
pub use scale::{ModelSize, Scale, ScalePreset, ScalesConfig, ShardShortfall};
pub use sections::{
    Config, DataConfig, DedupConfig, Device, EmaConfig, FilterConfig, HardExamplesConfig,
    ModelConfig, OnBadRecord, OptimizerConfig, Precision, Retention, SaveOptimizerState,
    ShardsConfig, SpikeConfig, StageConfig, SupervisorConfig, TokenizerConfig, TrainingConfig,
    Watcher, WorkerConfig,
};
pub use source::{
    Compression, DEFAULT_TEXT_KEY, DataSource, EmbeddedCorpus, PathSource, SourceFormat,
};
pub use supervision::{
    DrillSchedule, FailureAction, OnDiverged, OnFailure, OnResumeMismatch, OnStall,
    ReplayTolerance, Slowdown, StaleAfter, StaleAuto, SupervisorMode,
};
pub use tracking::{
    MetricsWriter, MlflowConfig, TensorboardConfig, TrackingConfig, WandbConfig, WandbMode,
};

use tree::Node;

/// The built-in defaults: every key, with a comment saying what it does.
pub const DEFAULT_YAML: &str = include_str!("../../configs/default.yaml");

/// The worker program this project builds.
pub const LAVENDER_WORKER: &str = "lavender-worker";

/// Where the multi-GPU path (a lavender-protocol script under torchrun) is described.
pub const MULTI_GPU_DOC: &str = "docs/PYTHON.md";

pub(crate) use error::DEFAULT_ORIGIN;

static DEFAULT_TREE: LazyLock<Node> = LazyLock::new(|| {
    tree::parse_document(DEFAULT_YAML, DEFAULT_ORIGIN)
        .unwrap_or_else(|e| panic!("built-in {DEFAULT_ORIGIN} is not valid YAML: {e}"))
});

impl Default for Config {
    fn default() -> Self {
        // A unit test checks that the embedded defaults parse and validate.
        de::from_tree(&DEFAULT_TREE)
            .unwrap_or_else(|e| panic!("built-in {DEFAULT_ORIGIN} is not a valid config: {e}"))
    }
}

impl Config {
    /// Defaults < `opts.file` < `opts.env` < `opts.overrides`, then [`Config::validate`].
    /// Relative paths are taken against the layer that set them (see [`PATH_KEYS`]):
    /// the file's folder, or `opts.cwd` for the environment and overrides.
    pub fn load(opts: &LoadOptions) -> Result<Config, ConfigError> {
        Config::load_located(opts).map(|(config, _)| config)
    }

    /// [`Config::load`], with where each value came from.
    pub fn load_located(opts: &LoadOptions) -> Result<(Config, ConfigOrigins), ConfigError> {
        let file = match &opts.file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| {
                    ConfigError::new(ConfigErrorKind::Read {
                        path: path.clone(),
                        source,
                    })
                })?;
                Some((text, path.display().to_string()))
            }
            None => None,
        };
        build(
            file.as_ref()
                .map(|(text, name)| (text.as_str(), name.as_str())),
            opts,
            Rebase::Yes(opts.cwd.as_deref()),
        )
    }

    /// Parses a config text over the defaults (keys it leaves out keep their
    /// defaults) and validates it; `origin` names the text in errors (the file name).
    /// Paths are kept as written (a text has no folder).
    pub fn from_yaml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        build(Some((text, origin)), &LoadOptions::default(), Rebase::No).map(|(c, _)| c)
    }

    /// Checks ranges and consistency. Errors name the key path; [`Config::load`] and
    /// [`Config::from_yaml_str`] add the file position too.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::validate(self)
    }

    /// The layered config as YAML; it parses back to an equal `Config`. Model size keys
    /// left null stay null (they follow the scale); `<run>/config.yaml` is the YAML of
    /// [`Config::resolved`].
    pub fn to_yaml(&self) -> String {
        let body = serde_saphyr::to_string(self)
            .expect("a Config holds only strings, numbers, lists and maps, which always serialize");
        format!("# lavender: resolved config\n{body}")
    }

    /// The data root these settings name, and how it was chosen
    /// ([`crate::data_root::resolve`]): `flag` (`--data-root`) > `env`'s
    /// `LAVENDER_DATA_ROOT` > `data_root` > `data_root_candidates` > a `data-root/`
    /// folder in `cwd` or above it > the per-user data folder.
    pub fn data_root(
        &self,
        flag: Option<&Path>,
        env: &crate::data_root::DataRootEnv,
        cwd: &Path,
    ) -> crate::data_root::Resolved {
        crate::data_root::resolve(&crate::data_root::Sources {
            flag,
            config: self.data_root.as_deref(),
            candidates: &self.data_root_candidates,
            cwd,
            env,
        })
    }

    /// The scale's preset (from the `scales` section).
    pub fn preset(&self) -> ScalePreset {
        *self.scales.get(self.scale)
    }

    /// The model this run builds: each `model.*` size key that is set, else the scale
    /// preset's value.
    pub fn model_size(&self) -> ModelSize {
        let preset = self.preset().model;
        let m = &self.model;
        ModelSize {
            n_layer: m.n_layer.unwrap_or(preset.n_layer),
            n_head: m.n_head.unwrap_or(preset.n_head),
            n_embd: m.n_embd.unwrap_or(preset.n_embd),
            n_positions: m.n_positions.unwrap_or(preset.n_positions),
        }
    }

    /// This config with the model's size keys filled in from the scale preset, as a
    /// run records it in its `config.yaml` (so the run names the model it trained even
    /// when read with another scale).
    pub fn resolved(&self) -> Config {
        let size = self.model_size();
        let mut config = self.clone();
        config.model.n_layer = Some(size.n_layer);
        config.model.n_head = Some(size.n_head);
        config.model.n_embd = Some(size.n_embd);
        config.model.n_positions = Some(size.n_positions);
        config
    }

    /// When the corpus filled `available` training shards (`build_shards`' count),
    /// whether that is fewer than this scale's preset asks for.
    pub fn shard_shortfall(&self, available: u64) -> Option<ShardShortfall> {
        ShardShortfall::check(self.scale, u64::from(self.preset().shards), available)
    }

    /// Steps of stage `idx`: its `steps`, or, when null, its share of the scale
    /// preset's `total_steps`. The null stages split the preset by weight (pretrain 70,
    /// every other stage 15, so pretrain/sft/dpo get 70/15/15 %), rounded so they add up
    /// to the preset exactly, each at least 1.
    ///
    /// # Panics
    /// If `idx` is not an index of `training.stages`.
    pub fn stage_steps(&self, idx: usize) -> u64 {
        let stages = &self.training.stages;
        if let Some(steps) = stages[idx].steps {
            return steps;
        }
        let unset: Vec<usize> = (0..stages.len())
            .filter(|&i| stages[i].steps.is_none())
            .collect();
        let names: Vec<&str> = unset.iter().map(|&i| stages[i].name.as_str()).collect();
        let parts = scale::split_steps(self.preset().total_steps, &names);
        let pos = unset.iter().position(|&i| i == idx).unwrap_or_default();
        parts[pos]
    }

    /// Steps of all stages together.
    pub fn total_steps(&self) -> u64 {
        (0..self.training.stages.len())
            .map(|i| self.stage_steps(i))
            .sum()
    }

    /// Whether `worker.command` runs lavender-worker (its program's file name), which
    /// trains in one process on one device.
    pub fn runs_lavender_worker(&self) -> bool {
        self.worker.command.first().is_some_and(|program| {
            Path::new(program)
                .file_name()
                .is_some_and(|name| name == LAVENDER_WORKER)
        })
    }

    /// How close a resumed worker's replayed steps must come to the first pass's
    /// (`supervisor.replay_tolerance`; `auto`: bit for bit for `lavender-worker` on the
    /// CPU, else [`ReplayTolerance::DEFAULT_RELATIVE`]).
    pub fn replay_tolerance(&self) -> crate::replay::Tolerance {
        use crate::replay::Tolerance;
        match self.supervisor.replay_tolerance {
            ReplayTolerance::Exact => Tolerance::Exact,
            ReplayTolerance::Relative(r) => Tolerance::Relative(r),
            ReplayTolerance::Auto if self.runs_lavender_worker() && self.device == Device::Cpu => {
                Tolerance::Exact
            }
            ReplayTolerance::Auto => Tolerance::Relative(ReplayTolerance::DEFAULT_RELATIVE),
        }
    }

    /// lavender-worker is one process on one device: a launch of several tasks
    /// (`launch.slurm.ntasks > 1`), or a `WORLD_SIZE` above 1 in its environment
    /// (`world_size`, as torchrun sets it), would start copies that do not coordinate
    /// and write the same run directory. The error names the multi-GPU path.
    pub fn check_one_process(&self, world_size: Option<&str>) -> Result<(), ConfigError> {
        let (ntasks, nodes) = (self.launch.slurm.ntasks, self.launch.slurm.nodes);
        if nodes > 1 {
            return Err(ConfigError::new(ConfigErrorKind::Invalid {
                path: "launch.slurm.nodes".into(),
                message: format!(
                    "{nodes} nodes would start copies of lavender-worker on {nodes} hosts, but it trains in one process on one device and its copies would not meet; set nodes and ntasks to 1, or for several hosts make worker.command a lavender-protocol script under torchrun, one agent per node: [examples/torchrun/slurm-torchrun.sh, torchrun, …, train.py] (docs/SLURM.md, \"Two nodes\")"
                ),
            }));
        }
        if ntasks > 1 {
            return Err(ConfigError::new(ConfigErrorKind::Invalid {
                path: "launch.slurm.ntasks".into(),
                message: format!(
                    "{ntasks} tasks would start {ntasks} copies of lavender-worker, which trains in one process on one device; set it to 1 (and pick the GPU with device: cuda:N), or for several GPUs make worker.command a lavender-protocol script under torchrun ({MULTI_GPU_DOC})"
                ),
            }));
        }
        let world = world_size.and_then(|w| w.trim().parse::<u64>().ok());
        if let Some(n) = world.filter(|&n| n > 1) {
            return Err(ConfigError::new(ConfigErrorKind::Invalid {
                path: "WORLD_SIZE".into(),
                message: format!(
                    "{n} processes were started (as torchrun does), but lavender-worker trains in one process on one device; start it alone, or for several GPUs make worker.command a lavender-protocol script under torchrun ({MULTI_GPU_DOC})"
                ),
            }));
        }
        Ok(())
    }

    /// The stage named `name`, with its index.
    pub fn stage(&self, name: &str) -> Option<(usize, &StageConfig)> {
        self.training
            .stages
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name)
    }

    /// The step of this pipeline named `name` (`--from-step`); else the line that
    /// says it is none and names them.
    pub fn step_named(&self, name: &str) -> Result<PipelineStep, String> {
        self.steps
            .iter()
            .copied()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| self.not_a_step(name))
    }

    /// `--from-step NAME` names no step of this pipeline: which ones it has.
    pub fn not_a_step(&self, name: &str) -> String {
        let steps: Vec<&str> = self.steps.iter().map(|s| s.as_str()).collect();
        format!(
            "--from-step {name}: not a step of this pipeline; its steps are {}",
            steps.join(", ")
        )
    }
}

/// Whether relative paths are rebased (see `paths.rs`), and against which working
/// directory values from the environment and overrides are taken.
enum Rebase<'a> {
    Yes(Option<&'a Path>),
    No,
}

/// Layers the sources over the defaults, reads the result and validates it; errors
/// found after merging are located through the merged tree.
fn build(
    file: Option<(&str, &str)>,
    opts: &LoadOptions,
    rebase: Rebase<'_>,
) -> Result<(Config, ConfigOrigins), ConfigError> {
    let mut root = DEFAULT_TREE.clone();
    if let Some((text, name)) = file {
        let node = tree::parse_document(text, name)?;
        if matches!(node.value, tree::Value::Null) {
            // An empty file (`~`) changes nothing.
        } else if !matches!(node.value, tree::Value::Map(_)) {
            return Err(ConfigError::new(ConfigErrorKind::WrongType {
                path: "(top level)".into(),
                expected: "a mapping of config keys (e.g. `scale: tiny`)".into(),
                found: node.describe(),
            })
            .at(Some(node.origin)));
        } else {
            tree::merge(&mut root, node);
        }
    }
    layers::apply_env(&mut root, &opts.env)?;
    layers::apply_overrides(&mut root, &opts.overrides)?;
    if let Rebase::Yes(cwd) = rebase {
        paths::rebase(&mut root, cwd);
    }
    let config: Config = de::from_tree(&root)?;
    config.validate().map_err(|e| {
        let origin = e.path().and_then(|p| tree::locate(&root, p));
        e.at(origin)
    })?;
    Ok((config, ConfigOrigins::of_tree(&root)))
}
