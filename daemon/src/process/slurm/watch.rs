//! Watching a job until it ends, reporting its state and node as they change.

use std::time::Duration;

use super::query::{self, JobInfo};
use crate::exit::ExitOutcome;
use crate::process::backend::{ExitFuture, JobUpdate, JobUpdates};

pub fn until_done(job_id: String, every: Duration, updates: JobUpdates) -> ExitFuture {
    Box::pin(async move {
        let mut last: Option<JobUpdate> = None;
        loop {
            let id = job_id.clone();
            let info = tokio::task::spawn_blocking(move || query::look(&id))
                .await
                .unwrap_or(JobInfo::Unknown);
            let (update, outcome) = match info {
                JobInfo::Active {
                    state,
                    node,
                    reason,
                } => (
                    JobUpdate {
                        node,
                        state,
                        reason,
                    },
                    None,
                ),
                JobInfo::Ended {
                    state,
                    node,
                    outcome,
                } => (
                    JobUpdate {
                        node,
                        state,
                        reason: None,
                    },
                    Some(outcome),
                ),
                JobInfo::Unknown => (
                    JobUpdate {
                        node: last.as_ref().and_then(|l| l.node.clone()),
                        state: "UNKNOWN".into(),
                        reason: None,
                    },
                    Some(ExitOutcome::Unknown),
                ),
            };
            if last.as_ref() != Some(&update) {
                tracing::info!(job_id = %job_id, state = %update.state, reason = ?update.reason, node = ?update.node, "Slurm job");
                updates(update.clone());
                last = Some(update);
            }
            if let Some(outcome) = outcome {
                return outcome;
            }
            tokio::time::sleep(every).await;
        }
    })
}
