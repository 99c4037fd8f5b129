//! Watching a job until it ends, reporting its state and nodes as they change, and
//! noticing a lost node: when a job that ran stops running and one of its nodes is
//! DOWN or not responding, Slurm ended its steps for that (and, with `--requeue`, put
//! it back in the queue itself). The watcher then says so ("node n2 lost at step 120;
//! waiting for 2 nodes") and applies `launch.slurm.on_node_failure`.

use std::time::Duration;

use lavender::config::NodeFailurePolicy;

use super::nodes;
use super::query::{self, JobInfo};
use super::{JobUpdate, JobUpdates, SlurmJob};
use crate::exit::{ExitFuture, ExitOutcome};

pub fn until_done(
    job: SlurmJob,
    policy: NodeFailurePolicy,
    every: Duration,
    updates: JobUpdates,
) -> ExitFuture {
    Box::pin(async move {
        let job_id = job.job_id.clone();
        let mut last: Option<JobUpdate> = None;
        // The nodes it ran on last, while it runs; a watcher that takes over a job
        // (a restarted daemon) starts from what the previous one saw.
        let mut ran_on = job.seen.nodes.clone();
        let mut was_running = job.state.as_deref() == Some("RUNNING");
        let mut loss = job.seen.message.clone();
        let mut failed = job.seen.failed_on_node_loss;
        loop {
            let id = job_id.clone();
            let info = tokio::task::spawn_blocking(move || query::look(&id))
                .await
                .unwrap_or(JobInfo::Unknown);
            let (mut update, outcome, num_nodes) = match info {
                JobInfo::Active {
                    state,
                    node,
                    reason,
                    nodes,
                    num_nodes,
                } => (JobUpdate::new(state, node, reason, nodes), None, num_nodes),
                JobInfo::Ended {
                    state,
                    node,
                    outcome,
                    nodes,
                } => (
                    JobUpdate::new(state, node, None, nodes),
                    Some(outcome),
                    None,
                ),
                JobInfo::Unknown => (
                    JobUpdate::new(
                        "UNKNOWN".into(),
                        last.as_ref().and_then(|l| l.node.clone()),
                        None,
                        Vec::new(),
                    ),
                    Some(ExitOutcome::Unknown),
                    None,
                ),
            };
            let running = update.state == "RUNNING";
            if running {
                // Running again (requeued onto nodes): the loss is behind it.
                loss = None;
                if !update.nodes.is_empty() {
                    ran_on = update.nodes.clone();
                }
            } else if was_running && loss.is_none() && update.state != "UNREACHABLE" {
                loss = node_lost(&job, &ran_on, num_nodes, policy).await;
                failed |= loss.is_some() && policy == NodeFailurePolicy::Fail;
            }
            was_running = running;
            update.message = loss.clone();
            update.failed_on_node_loss = failed;
            if last.as_ref() != Some(&update) {
                tracing::info!(job_id = %job_id, state = %update.state, reason = ?update.reason, nodes = ?update.nodes, message = ?update.message, "Slurm job");
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

/// The job left `ran_on` without being running: if some of those nodes are lost,
/// the sentence to show, after acting on `policy` (requeue: Slurm did; wait: hold
/// the job to the same nodes; fail: cancel it).
async fn node_lost(
    job: &SlurmJob,
    ran_on: &[String],
    num_nodes: Option<u32>,
    policy: NodeFailurePolicy,
) -> Option<String> {
    let (job_id, ran_on, run_dir) = (
        job.job_id.clone(),
        ran_on.to_vec(),
        job.seen.run_dir.clone(),
    );
    tokio::task::spawn_blocking(move || {
        let lost = nodes::lost_now(&ran_on);
        if lost.is_empty() {
            return None;
        }
        let step = run_dir
            .as_deref()
            .and_then(|dir| lavender::heartbeat::read(&lavender::heartbeat::path(dir)).ok())
            .map(|hb| hb.step);
        // While it completes on the nodes left, NumNodes counts only those: the job
        // wants as many as it ran on.
        let wanted = num_nodes.unwrap_or(0).max(ran_on.len() as u32);
        let message = nodes::loss_message(&lost, step, wanted, policy);
        tracing::warn!(job_id, policy = policy.as_str(), "{message}");
        let acted = match policy {
            NodeFailurePolicy::Requeue => Ok(()),
            NodeFailurePolicy::Wait => super::run(
                "scontrol",
                &[
                    "update".into(),
                    format!("JobId={job_id}"),
                    format!("ReqNodeList={}", ran_on.join(",")),
                ],
            )
            .map(|_| ()),
            NodeFailurePolicy::Fail => super::control::cancel(&job_id),
        };
        if let Err(e) = acted {
            tracing::warn!(job_id, "on_node_failure: {}: {e:#}", policy.as_str());
        }
        Some(message)
    })
    .await
    .ok()
    .flatten()
}
