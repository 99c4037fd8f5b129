//! `POST /runs/prune`: old run directories deleted by the daemon, which knows the run
//! it is starting or running (a start waits while a prune deletes). Asked first
//! without `delete` for the plan, then with the names the operator confirmed: the
//! daemon deletes those of them that its plan still holds, and says which it kept.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// The newest runs kept (with the active run and every run one of them resumed
    /// from).
    pub keep_runs: usize,
    /// The run names to delete, as a plan named them; absent: only the plan.
    #[serde(default)]
    pub delete: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReply {
    /// The runs the plan deletes (by name, oldest last) and their size in bytes.
    pub planned: Vec<String>,
    pub bytes: u64,
    /// Deleted by this request.
    pub removed: Vec<String>,
    pub bytes_freed: u64,
    /// Named in `delete` but no longer in the plan (a start took it meanwhile): kept.
    pub kept: Vec<String>,
}
