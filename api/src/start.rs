//! `POST /pipeline/start`: what `lavenderd start` asks for (the operator guide's
//! flags) and what the daemon answers. The request is the core's
//! (`lavender::pipeline_file::StartRequest`): the pipeline's record keeps it.

use std::path::PathBuf;

use lavender::config::{PipelineStep, Scale};
use lavender::status::PipelineState;
use serde::{Deserialize, Serialize};

pub use lavender::pipeline_file::{ConfigFileRef, MAX_CHUNK, StartRequest, sha256_hex};

/// A start's answer (200).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartReply {
    pub state: PipelineState,
    pub chunk: u32,
    pub scale: Scale,
    pub active_step: Option<PipelineStep>,
    pub pid: Option<u32>,
    pub run_dir: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    pub resume_from: Option<PathBuf>,
    /// The Slurm job of the first step (launch.backend: slurm).
    #[serde(default)]
    pub slurm_job: Option<String>,
    /// Lines to show the operator, e.g. that the built shards are fewer than the
    /// scale asks for.
    #[serde(default)]
    pub notices: Vec<String>,
    /// `config: FILE (changed since the last start: KEY, …)`: what the start runs with.
    #[serde(default)]
    pub config: Option<String>,
    /// The start had nothing to run (every step finished, no `--force`) and did
    /// nothing: the line that says so, and the only one to show.
    #[serde(default)]
    pub nothing_to_do: Option<String>,
}

/// A start refused (409) because an unfinished run could be resumed and neither
/// `resume` nor `fresh` was given: the error and the two ways on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumableRefusal {
    pub error: String,
    pub fresh_command: String,
    pub resume_command: String,
    pub run_dir: PathBuf,
}
