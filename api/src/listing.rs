//! `GET /runs`, `GET /checkpoints` and `GET /logs`: what the data root holds, as
//! the API and the CLI list it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub name: String,
    pub path: PathBuf,
    pub started: String,
    pub checkpoints: u64,
    pub latest_checkpoint: Option<String>,
    /// The checkpoint this run resumed from (`<run>/lineage.json`), as
    /// `run-…/checkpoint` when it is another run's, else its path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
    /// The runs that together trained this one, oldest first, this one last, when
    /// it resumed another (`lavender::run::chain`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    pub name: String,
    pub path: PathBuf,
    pub stage: String,
    pub step: u64,
    pub saved_at: String,
    pub loss: Option<f64>,
    pub val_loss: Option<f64>,
}

/// `GET /checkpoints?run=ID`: a run's name (default: the newest run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsQuery {
    pub run: Option<String>,
}

/// `GET /logs?lines=N`: how many of the log's last lines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    pub lines: Option<usize>,
}
