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
    /// What the daemon found reading it back against its manifest.
    #[serde(default)]
    pub verification: Verification,
    /// For a damaged one, what: the file, expected against found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
    /// With replication, whether a copy is committed off the machine (`None`: no
    /// replication, or the daemon has not listed this run's remote copies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<bool>,
    /// What a restore drill of it found (`lavenderd drill`): `drilled`, or `drill
    /// failed: step S loss A vs B`; `None`: never drilled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<String>,
}

/// A checkpoint read back by the daemon against its `manifest.json`, or not yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verification {
    /// Every file matches the manifest.
    Verified,
    /// A file does not (`damage` says which and how).
    Damaged,
    /// Not read back yet.
    #[default]
    Pending,
    /// No manifest to check against (a writer without one).
    Unverified,
}

impl Verification {
    pub fn as_str(self) -> &'static str {
        match self {
            Verification::Verified => "verified",
            Verification::Damaged => "damaged",
            Verification::Pending => "pending",
            Verification::Unverified => "unverified",
        }
    }
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
