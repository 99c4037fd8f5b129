//! The daemon itself: `GET /healthz` and `POST /daemon/restart`.

use std::path::PathBuf;

use lavender::status::PipelineState;
use serde::{Deserialize, Serialize};

/// `GET /healthz`: the daemon answers; its pid, when this daemon image started (it
/// changes when the daemon restarts alone, the pid does not) and the pipeline state.
/// Fields in name order, as the body has always listed them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    pub data_root: PathBuf,
    pub ok: bool,
    pub pid: u32,
    /// RFC 3339 UTC, milliseconds.
    pub started_at: String,
    pub state: PipelineState,
    pub version: String,
}

/// `POST /daemon/restart`: answered at once with what restarts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartReply {
    pub pid: u32,
    pub started_at: String,
    pub state: PipelineState,
    /// The worker that keeps training (its pid and start time, or Slurm job).
    pub worker: Option<String>,
    pub worker_pid: Option<u32>,
}
