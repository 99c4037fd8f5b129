//! What the status says of replication (`replication` in the status JSON): kept by
//! the replication task, read by the status and by the alert's watcher.

use serde::Serialize;

/// What the status says of replication (`replication` in the status JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplicationStatus {
    /// The target URL (it never holds credentials).
    pub target: String,
    /// The newest checkpoint of the current run that is safely remote (uploaded,
    /// read back, committed).
    pub newest_remote: Option<RemoteRef>,
    /// Steps of the newest local checkpoint past the newest remote one.
    pub lag_steps: Option<u64>,
    /// Seconds the oldest local checkpoint newer than the newest remote one has been
    /// waiting to be safely remote; 0 when caught up.
    pub lag_s: Option<f64>,
    /// `lag_s` passed `replicate.max_lag_s` (false when that is not set).
    pub behind: bool,
    /// The checkpoint being uploaded now.
    pub in_flight: Option<String>,
    /// The last upload's rate in MB/s (10^6 bytes, read-back included).
    pub last_mb_per_s: Option<f64>,
    pub consecutive_failures: u32,
    /// What the last failure said (credentials are never in it).
    pub last_error: Option<String>,
    /// Local checkpoints of the run that will not be replicated, newest last (at
    /// most [`NOT_REPLICATED_KEPT`]): each name and why (damaged locally, gone before
    /// its upload finished).
    pub not_replicated: Vec<NotReplicated>,
    /// When (unix seconds) the oldest checkpoint waiting to be remote was completed;
    /// `lag_s` is taken from it when the status is read.
    #[serde(skip)]
    pub(super) waiting_since: Option<f64>,
    /// `replicate.max_lag_s`.
    #[serde(skip)]
    pub(super) max_lag_s: Option<u64>,
    /// The last failure needs an operator (the target could not be opened, or it
    /// refused the credentials): `last_error` says why.
    #[serde(skip)]
    pub(super) unavailable: bool,
    /// The run the task last looked at and its checkpoints committed remotely (the
    /// dashboard's checkpoint table says where each one's copies are).
    #[serde(skip)]
    pub(super) remote_checkpoints: Option<(String, std::collections::BTreeSet<String>)>,
}

impl ReplicationStatus {
    /// Whether checkpoint `name` of `run` is committed remotely; `None` when the task
    /// has not listed that run.
    pub fn is_remote(&self, run: &str, name: &str) -> Option<bool> {
        match &self.remote_checkpoints {
            Some((r, names)) if r == run => Some(names.contains(name)),
            _ => None,
        }
    }
}

/// How many `not_replicated` entries the status keeps.
pub const NOT_REPLICATED_KEPT: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotReplicated {
    pub checkpoint: String,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteRef {
    pub run: String,
    pub checkpoint: String,
    pub step: u64,
    pub uploaded_at: String,
}
