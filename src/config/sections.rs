//! The config's sections as typed structs. Key names and meanings are documented in
//! `configs/default.yaml`, which holds every key with its default.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::supervision::{
    DrillSchedule, OnDiverged, OnFailure, OnResumeMismatch, OnStall, ReplayTolerance, Slowdown,
    StaleAfter, StaleAuto, SupervisorMode,
};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::api::ApiConfig;
use super::launch::LaunchConfig;
use super::logging::LoggingConfig;
use super::notify::NotifyConfig;
use super::replicate::ReplicateConfig;
use super::scale::{Scale, ScalesConfig};
use super::source::DataSource;
use super::tracking::TrackingConfig;
use crate::pipeline_step::PipelineStep;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub scale: Scale,
    pub chunk: u32,
    pub seed: u64,
    pub device: Device,
    pub threads: u32,
    pub data_root: Option<PathBuf>,
    pub data_root_candidates: Vec<PathBuf>,
    pub steps: Vec<PipelineStep>,
    pub worker: WorkerConfig,
    pub data: DataConfig,
    /// What each scale means: steps, shards and the model size.
    pub scales: ScalesConfig,
    pub model: ModelConfig,
    pub optimizer: OptimizerConfig,
    pub training: TrainingConfig,
    pub supervisor: SupervisorConfig,
    /// Whom the HTTP API answers over TCP. Absent in configs older than the section:
    /// defaults apply; left out of a resolved config when it is the default.
    #[serde(default, skip_serializing_if = "ApiConfig::is_default")]
    pub api: ApiConfig,
    /// Absent in configs older than the section: defaults apply.
    #[serde(default)]
    pub notify: NotifyConfig,
    /// Where steps run (this machine or a Slurm cluster); absent = local. Left out
    /// of a resolved config when it is the default, so such configs read as before.
    #[serde(default, skip_serializing_if = "LaunchConfig::is_default")]
    pub launch: LaunchConfig,
    /// Log rotation; absent = the defaults, and left out of a resolved config then.
    #[serde(default, skip_serializing_if = "LoggingConfig::is_default")]
    pub logging: LoggingConfig,
    /// A copy of each checkpoint off the machine; absent = none, and left out of a
    /// resolved config then.
    #[serde(default, skip_serializing_if = "ReplicateConfig::is_default")]
    pub replicate: ReplicateConfig,
    /// Experiment trackers; absent = none, and left out of a resolved config then.
    #[serde(default, skip_serializing_if = "TrackingConfig::is_default")]
    pub tracking: TrackingConfig,
}

/// The worker's compute device: `auto`, `cpu`, `cuda` (the first GPU), `cuda:N`
/// (the GPU of index N) or `mps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Auto,
    Cpu,
    /// `cuda` (None: the first GPU) or `cuda:N`.
    Cuda(Option<u32>),
    Mps,
}

impl Device {
    /// What the config and `--device` accept, for error messages.
    pub const NAMES: &'static [&'static str] = &["auto", "cpu", "cuda", "cuda:N", "mps"];

    /// The GPU index of `cuda` / `cuda:N`.
    pub fn cuda_index(self) -> Option<u32> {
        match self {
            Device::Cuda(n) => Some(n.unwrap_or(0)),
            _ => None,
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(None) => f.write_str("cuda"),
            Device::Cuda(Some(n)) => write!(f, "cuda:{n}"),
            Device::Mps => f.write_str("mps"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;

    /// `auto`, `cpu`, `cuda`, `cuda:N` or `mps`; the error says what is accepted.
    fn from_str(s: &str) -> Result<Device, String> {
        Ok(match s {
            "auto" => Device::Auto,
            "cpu" => Device::Cpu,
            "cuda" => Device::Cuda(None),
            "mps" => Device::Mps,
            other => match other.strip_prefix("cuda:").map(str::parse::<u32>) {
                Some(Ok(n)) => Device::Cuda(Some(n)),
                _ => {
                    return Err(format!(
                        "`{other}` is not a device; use one of {} (N = the GPU's index, as nvidia-smi numbers them)",
                        Device::NAMES.join(", ")
                    ));
                }
            },
        })
    }
}

impl Serialize for Device {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Device {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct DeviceVisitor;
        impl Visitor<'_> for DeviceVisitor {
            type Value = Device;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("one of `auto`, `cpu`, `cuda`, `cuda:N`, `mps`")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map_err(|_| E::unknown_variant(v, Device::NAMES))
            }
        }
        d.deserialize_str(DeviceVisitor)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// argv prefix; the daemon appends `<step> --config … --data-root … --run-dir …`.
    pub command: Vec<String>,
    /// Extra environment for the worker process.
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    pub sources: Vec<DataSource>,
    #[serde(serialize_with = "double_quoted")]
    pub document_separator: String,
    pub dedup: DedupConfig,
    pub filter: FilterConfig,
    pub shards: ShardsConfig,
    pub tokenizer: TokenizerConfig,
    pub sft_jsonl: Option<PathBuf>,
    pub dpo_jsonl: Option<PathBuf>,
    pub heldout_fraction: f64,
    pub hard_examples: HardExamplesConfig,
    /// What `downloads` does with a record (a JSONL line, a Parquet or Arrow row) it
    /// cannot read. Absent in configs older than the key: `fail`.
    #[serde(default)]
    pub on_bad_record: OnBadRecord,
}

/// `data.on_bad_record`: stop at a malformed record, or skip it and count it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBadRecord {
    /// The step fails, naming the file, the record's place and what was expected.
    #[default]
    Fail,
    /// The record is skipped; the step's manifest and the status count it.
    Skip,
}

impl OnBadRecord {
    pub fn as_str(self) -> &'static str {
        match self {
            OnBadRecord::Fail => "fail",
            OnBadRecord::Skip => "skip",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DedupConfig {
    pub paragraphs: bool,
    pub near_duplicates: bool,
    pub near_threshold: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    pub min_chars: u64,
    pub max_chars: u64,
    pub max_nonprintable_ratio: f64,
    pub max_repeated_line_ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardsConfig {
    pub shard_bytes: u64,
    pub validation_fraction: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerConfig {
    pub vocab_size: u32,
    pub min_frequency: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardExamplesConfig {
    pub top_k: u32,
    pub upsample: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The size keys: `None` = the scale preset's (see [`Config::model_size`]).
    pub n_layer: Option<u32>,
    pub n_head: Option<u32>,
    pub n_embd: Option<u32>,
    pub n_positions: Option<u32>,
    pub dropout: f64,
    pub layer_norm_epsilon: f64,
    /// A Hugging Face GPT-2 checkpoint directory (`config.json`, weights,
    /// `tokenizer.json`) training starts from: its shape, tokenizer and weights.
    /// Absent in configs older than the key: none.
    #[serde(default)]
    pub init_from: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    pub betas: [f64; 2],
    pub eps: f64,
    pub weight_decay: f64,
    pub grad_clip: f64,
    pub warmup_steps: u64,
    pub min_lr_ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingConfig {
    pub batch_size: u32,
    pub seq_len: u32,
    pub grad_accum: u32,
    pub log_every: u64,
    pub eval_every: u64,
    pub eval_batches: u32,
    pub keep_checkpoints: u32,
    pub save_optimizer_state: SaveOptimizerState,
    /// Arithmetic of forward and backward (weights, optimizer state and checkpoints
    /// stay fp32). Absent in configs older than the key: `auto`.
    #[serde(default)]
    pub precision: Precision,
    /// TF32 matrix products on CUDA (fp32 matmuls with a 10-bit mantissa).
    #[serde(default)]
    pub tf32: bool,
    /// An exponential moving average of the weights; `None` (the default): off.
    #[serde(default)]
    pub ema: Option<EmaConfig>,
    pub stages: Vec<StageConfig>,
    /// When the worker judges a run diverged. Absent in configs older than the key:
    /// the defaults.
    #[serde(default)]
    pub spike: SpikeConfig,
}

/// `training.spike`: a loss above `factor` × the median of the last `window` steps,
/// for `patience` steps in a row, is a divergence (as is a non-finite loss or
/// gradient, always).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpikeConfig {
    pub factor: f64,
    pub window: u32,
    pub patience: u32,
}

impl Default for SpikeConfig {
    fn default() -> Self {
        SpikeConfig {
            factor: 3.0,
            window: 100,
            patience: 3,
        }
    }
}

/// `training.precision`: the arithmetic of forward and backward under autocast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// bf16 on a CUDA device that computes it natively (compute capability 8.0 or
    /// newer), fp32 on the CPU and everywhere else.
    #[default]
    Auto,
    Fp32,
    Bf16,
    /// fp16 with a dynamic loss scale.
    Fp16,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Auto => "auto",
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `training.ema`: the weights' exponential moving average, `ema ← decay·ema +
/// (1 − decay)·weights` every `every` optimizer steps, restarted from the weights
/// when each stage starts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmaConfig {
    /// In (0, 1), e.g. 0.999.
    pub decay: f64,
    /// Optimizer steps between two updates.
    #[serde(default = "default_ema_every")]
    pub every: u64,
}

fn default_ema_every() -> u64 {
    1
}

/// Which checkpoints carry `optimizer.safetensors`. YAML `true` means `last`, `false`
/// means `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaveOptimizerState {
    None,
    Last,
    All,
}

impl SaveOptimizerState {
    const NAMES: &'static [&'static str] = &["none", "last", "all"];

    pub fn as_str(self) -> &'static str {
        match self {
            SaveOptimizerState::None => "none",
            SaveOptimizerState::Last => "last",
            SaveOptimizerState::All => "all",
        }
    }
}

impl fmt::Display for SaveOptimizerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SaveOptimizerState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SaveOptimizerState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct StateVisitor;
        impl Visitor<'_> for StateVisitor {
            type Value = SaveOptimizerState;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("one of `none`, `last`, `all` (or true = last, false = none)")
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(if v {
                    SaveOptimizerState::Last
                } else {
                    SaveOptimizerState::None
                })
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "none" => Ok(SaveOptimizerState::None),
                    "last" => Ok(SaveOptimizerState::Last),
                    "all" => Ok(SaveOptimizerState::All),
                    other => Err(E::unknown_variant(other, SaveOptimizerState::NAMES)),
                }
            }
        }
        d.deserialize_any(StateVisitor)
    }
}

/// One training stage (pretrain, sft, dpo, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// `[a-z0-9_]+`, unique; used in checkpoint directory names.
    pub name: String,
    /// Optimizer steps; `None` = a share of the scale preset (see [`Config::stage_steps`]).
    #[serde(default)]
    pub steps: Option<u64>,
    /// Peak learning rate.
    pub lr: f64,
    /// Save a checkpoint every N steps.
    #[serde(default = "default_checkpoint_every")]
    pub checkpoint_every: u64,
    /// DPO's KL-penalty strength; only the dpo stage reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,
}

fn default_checkpoint_every() -> u64 {
    100
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisorConfig {
    #[serde(deserialize_with = "socket_addr")]
    pub listen: SocketAddr,
    pub allow_non_loopback: bool,
    /// How long a training worker may go without a heartbeat before it counts as hung.
    pub stale_after_s: StaleAfter,
    /// How `stale_after_s: auto` learns the allowance.
    pub stale_auto: StaleAuto,
    /// Until the first heartbeat after a (re)start, and while it says `starting`.
    pub startup_grace_s: u64,
    /// While the heartbeat says `loading` (a checkpoint or the data).
    pub loading_grace_s: u64,
    /// While the heartbeat says `evaluating`.
    pub evaluating_grace_s: u64,
    /// While the heartbeat says `saving`.
    pub saving_grace_s: u64,
    /// What a hung worker gets.
    pub on_stall: OnStall,
    /// Seconds between SIGTERM and SIGKILL when a hung worker is killed; fractions allowed.
    pub stall_kill_grace_s: f64,
    pub max_restarts: u32,
    /// The wait before the 2nd, 3rd, … restart in a row (the first is immediate);
    /// the last value repeats. Seconds; fractions allowed (`[0.5, 2, 10]`).
    pub restart_backoff_s: Vec<f64>,
    /// Restarts in a row that did not train past the step they resumed from, after
    /// which the pipeline fails.
    pub max_no_progress_restarts: u32,
    /// The action per failure kind the worker reports.
    pub on_failure: OnFailure,
    /// What a worker that stopped with `diverged` gets.
    pub on_diverged: OnDiverged,
    /// How close a resumed worker's replayed steps must come to the first pass's.
    #[serde(default = "default_replay_tolerance")]
    pub replay_tolerance: ReplayTolerance,
    /// What a replayed step that differs gets.
    #[serde(default)]
    pub on_resume_mismatch: OnResumeMismatch,
    /// Restore drills while training goes on.
    #[serde(default)]
    pub drill: DrillSchedule,
    /// Rollbacks within `rollback_window_steps` of each other before a divergence
    /// fails the pipeline.
    pub max_rollbacks: u32,
    /// How far apart (training steps) two divergences must be detected for the
    /// earlier rollback no longer to count against `max_rollbacks`: separate spikes
    /// each get their rollback. Absent in configs older than the key: 1000.
    #[serde(default = "default_rollback_window_steps")]
    pub rollback_window_steps: u64,
    /// The same failure (kind and message, within one checkpoint interval of the
    /// previous one) this many times in a row fails the pipeline, whatever
    /// `restart_reset_after_s` says. Absent in configs older than the key: 3.
    #[serde(default = "default_max_same_failure")]
    pub max_same_failure: u32,
    /// At daemon start, resume a pipeline interrupted by the daemon's own exit or by
    /// a power loss (an operator's stop stays stopped).
    pub resume_on_start: bool,
    pub restart_reset_after_s: u64,
    pub stop_timeout_s: u64,
    pub keep_runs: Option<u32>,
    pub watcher: Watcher,
    pub poll_interval_ms: u64,
    /// Who deletes old checkpoints. Absent in configs older than the key: the daemon.
    #[serde(default)]
    pub retention: Retention,
    /// Take a hung worker's evidence (its processes' stacks, `/proc` state, open
    /// files, …) before killing it. Absent in configs older than the key: true.
    #[serde(default = "default_true")]
    pub hang_evidence: bool,
    /// Act on decisions, or only write them down (`observe`). Absent in configs
    /// older than the key: act.
    #[serde(default)]
    pub mode: SupervisorMode,
    /// Seconds a data step or `mine_hard` may go without a progress beat
    /// (`<run>/step_heartbeat.json`) before it counts as hung. Absent in configs
    /// older than the key: 1800.
    #[serde(default = "default_data_step_stale_after_s")]
    pub data_step_stale_after_s: u64,
    /// When a run that got slower says so. Absent in configs older than the key:
    /// factor 1.3 for 300 s.
    #[serde(default)]
    pub slowdown: Slowdown,
    /// How long a checkpoint's recorded "verified" spares a resume from reading every
    /// byte again, while its files are unchanged (one `stat` of each); older, it is
    /// read again (bit rot changes no `stat`). 0: always read again. Absent in
    /// configs older than the key: 86400 (a day).
    #[serde(default = "default_verdict_max_age_s")]
    pub verdict_max_age_s: u64,
    /// How long a relaunch waits for a checkpoint that cannot be read (EIO, ESTALE,
    /// EACCES: a storage error, not damage) to read again, trying with a backoff,
    /// before the pipeline fails naming the file; nothing is set aside meanwhile.
    /// Absent in configs older than the key: 600.
    #[serde(default = "default_storage_error_wait_s")]
    pub storage_error_wait_s: u64,
}

fn default_storage_error_wait_s() -> u64 {
    600
}

fn default_verdict_max_age_s() -> u64 {
    86_400
}

fn default_true() -> bool {
    true
}

fn default_data_step_stale_after_s() -> u64 {
    1800
}

fn default_replay_tolerance() -> ReplayTolerance {
    ReplayTolerance::Auto
}

fn default_rollback_window_steps() -> u64 {
    1000
}

fn default_max_same_failure() -> u32 {
    3
}

/// Who enforces checkpoint retention (`training.keep_checkpoints`, the newest, the
/// best by validation loss).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retention {
    /// The daemon, after each checkpoint a worker saves, unless the worker declares in
    /// its `run_started` event that it prunes its own (`"retention": "worker"`).
    #[default]
    Daemon,
    /// The worker alone; the daemon never deletes a checkpoint.
    Worker,
}

/// File-watching backend for the daemon's status cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Watcher {
    Native,
    Poll,
}

/// `"\n\n"` reads better in `config.yaml` than a block scalar of blank lines.
fn double_quoted<S: Serializer>(value: &str, s: S) -> Result<S::Ok, S::Error> {
    serde_saphyr::DoubleQuoted(value).serialize(s)
}

fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    text.trim().parse().map_err(|_| {
        de::Error::custom(format!(
            "`{text}` is not an IP:PORT address; write it like 127.0.0.1:7070"
        ))
    })
}
