//! The worker a record names: a local process (pid + start time) or a Slurm job, as
//! `pipeline.json` keeps it. Probing or signalling one is the daemon's.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::PipelineStep;

/// The worker a record names while it runs or stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// The local process (pid + start time) or the Slurm job.
    #[serde(flatten)]
    pub handle: WorkerHandle,
    pub step: PipelineStep,
    /// The start-up grace for heartbeats counts from here (RFC 3339 UTC on disk).
    #[serde(with = "crate::time::rfc3339")]
    pub started_at: DateTime<Utc>,
    /// The training step of the checkpoint it resumed from (a restart or a resume):
    /// a worker that ends without training past it made no progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from_step: Option<u64>,
}

#[cfg(test)]
impl WorkerRecord {
    /// A local training worker, pid 7, started 2026-01-01: for tests that build a
    /// record whole.
    pub(crate) fn sample() -> WorkerRecord {
        WorkerRecord {
            handle: WorkerHandle::Local(ProcessIdentity {
                pid: 7,
                start_time: "1".into(),
                generation: None,
            }),
            step: PipelineStep::Train,
            started_at: "2026-01-01T00:00:00Z".parse().unwrap(),
            resumed_from_step: None,
        }
    }
}

/// What identifies a running step across daemon restarts (saved in `pipeline.json`).
/// Untagged so that state files written before Slurm support still load as `Local`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WorkerHandle {
    Slurm { slurm: SlurmJob },
    Local(ProcessIdentity),
}

impl WorkerHandle {
    /// The local process id; a Slurm job has none on this machine.
    pub fn pid(&self) -> Option<u32> {
        match self {
            WorkerHandle::Local(id) => Some(id.pid),
            WorkerHandle::Slurm { .. } => None,
        }
    }

    /// The same step's process or job, whatever the Slurm job's state, node or
    /// reason were when each was seen.
    pub fn same_as(&self, other: &WorkerHandle) -> bool {
        match (self, other) {
            (WorkerHandle::Local(a), WorkerHandle::Local(b)) => a == b,
            (WorkerHandle::Slurm { slurm: a }, WorkerHandle::Slurm { slurm: b }) => {
                a.job_id == b.job_id
            }
            _ => false,
        }
    }

    pub fn slurm_job(&self) -> Option<&SlurmJob> {
        match self {
            WorkerHandle::Slurm { slurm } => Some(slurm),
            WorkerHandle::Local(_) => None,
        }
    }
}

impl std::fmt::Display for WorkerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerHandle::Local(id) => write!(f, "pid {}", id.pid),
            WorkerHandle::Slurm { slurm } => write!(f, "Slurm job {}", slurm.job_id),
        }
    }
}

/// A process is identified by its pid *and* its start time, so a pid the kernel
/// reused for an unrelated process is never mistaken for our worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// Opaque start-time token: clock ticks since boot on Linux, `ps` lstart on macOS.
    pub start_time: String,
    /// A worker's generation: the marker in the environment of every process it
    /// starts. Absent in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
}

/// A submitted job as `pipeline.json` keeps it: its id, and where and how it was
/// last seen (for the status).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub job_id: String,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the watcher saw of it beyond its state (boxed: a handle stays small
    /// in the pipeline's messages).
    #[serde(flatten)]
    pub seen: Box<JobSeen>,
}

/// A job's nodes and what happened to them, as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSeen {
    /// The allocation's nodes, the batch node first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// What happened to the job, for a person ("node n2 lost at step 120; waiting
    /// for 2 nodes"), while it matters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A node was lost and `on_node_failure: fail` cancelled the job: its end fails
    /// the pipeline instead of restarting it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed_on_node_loss: bool,
    /// The train step's run directory, where rank 0's heartbeat tells the step a lost
    /// node interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_dir: Option<std::path::PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slurm_job_is_the_same_whatever_its_state_and_a_process_by_pid_and_start() {
        let job = |state: &str, node: Option<&str>| WorkerHandle::Slurm {
            slurm: SlurmJob {
                job_id: "42".into(),
                node: node.map(str::to_string),
                state: Some(state.into()),
                ..SlurmJob::default()
            },
        };
        assert!(job("PENDING", None).same_as(&job("RUNNING", Some("gpu7"))));
        let local = |pid, start: &str| {
            WorkerHandle::Local(ProcessIdentity {
                pid,
                start_time: start.into(),
                generation: None,
            })
        };
        assert!(local(7, "100").same_as(&local(7, "100")));
        assert!(!local(7, "100").same_as(&local(7, "200")), "a reused pid");
        assert!(!local(42, "1").same_as(&job("RUNNING", None)));
    }
}
