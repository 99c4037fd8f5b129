//! A worker ended: a stop finished, or judged (a hung worker's kill: `effects.rs`):
//! the next step, the step stopped from outside, or a failure for the policy
//! (`restart.rs`).

use lavender::failure::{Failure, FailureKind};

use super::{Actor, WorkerExit};
use crate::exit::ExitOutcome;
use crate::pipeline::judge::{Verdict, judge};
use crate::pipeline::machine::{Event, LiveWorker, PendingRestart, Stop};
use crate::pipeline::plan;
use crate::pipeline::stop::{StopReport, StopReports as _};
use lavender::pipeline_file::StopCause;
use lavender::steps::inputs::{LocalFiles, StepInputs};
use lavender::steps::markers;
use lavender::steps::start::ResolvedStart;

impl Actor {
    pub(super) fn on_exit(&mut self, exit: WorkerExit) {
        let WorkerExit {
            generation,
            outcome,
            files,
        } = exit;
        self.on(Event::WorkerExited {
            generation,
            outcome,
            files,
        });
    }

    /// The worker of a stop ended (the record says stopped): what it saved, to who
    /// asked.
    pub(super) fn stopped(&mut self, worker: LiveWorker, stop: Stop, outcome: ExitOutcome) {
        ended(&worker, outcome);
        let report = StopReport::after_exit(
            worker.step,
            &stop.mark,
            &self.layout.checkpoints_root(),
            stop.escalation.killed(),
        );
        tracing::info!("{}", report.message);
        self.commit();
        for waiter in stop.waiters {
            let _ = waiter.send(report.clone());
        }
        if stop.resume_after {
            self.resume_at_start(StopCause::DaemonExit);
        }
    }

    /// A running worker ended by itself (the record no longer names it): the next
    /// step, the step stopped from outside, or a failure for the policy.
    pub(super) fn judge_exit(
        &mut self,
        worker: LiveWorker,
        outcome: ExitOutcome,
        files: LocalFiles,
    ) {
        ended(&worker, outcome);
        let step = worker.step;
        // `on_node_failure: fail` cancelled the job when a node was lost: the
        // pipeline fails with that, rather than restart as after a crash.
        if let Some(job) = worker
            .handle
            .slurm_job()
            .filter(|j| j.seen.failed_on_node_loss)
        {
            let reason = job
                .seen
                .message
                .clone()
                .unwrap_or_else(|| format!("Slurm job {}: a node was lost", job.job_id));
            self.fail_after(step, reason, Some(outcome), None);
            return;
        }

        let judged = judge(
            step,
            outcome,
            self.record.run_dir.as_deref(),
            &self.layout.data_root,
            Some(worker.started_at),
        );
        match judged.verdict {
            Verdict::Success => {
                let chunk = ResolvedStart::of_record(&self.record, &self.config).chunk;
                let ran_with = plan::worker_config(&self.layout, &self.config);
                let inputs =
                    StepInputs::with_files(step, &ran_with, &self.layout.data_root, chunk, &files);
                if let Err(e) = markers::write(
                    &self.layout,
                    chunk,
                    step,
                    self.record.run_dir.as_deref(),
                    Some(inputs),
                ) {
                    tracing::error!("{e:#}");
                }
            }
            Verdict::Failed { ref failure, .. } => {
                tracing::warn!(%step, kind = %failure.kind, "the worker failed: {}", failure.message);
            }
            Verdict::StoppedExternally => {}
        }
        self.on(Event::ExitJudged {
            worker,
            outcome,
            verdict: judged.verdict,
            last_step: judged.last_step,
        });
    }

    /// The worker failed (the record shows how): a checkpoint it was given set
    /// aside, a wait for disk, or the policy's restart or failure.
    pub(super) fn worker_failed(
        &mut self,
        worker: LiveWorker,
        failure: Failure,
        outcome: ExitOutcome,
        last_step: Option<u64>,
    ) {
        if failure.kind == FailureKind::DamagedCheckpoint
            && self.fall_back(&worker, &failure, outcome)
        {
            return;
        }
        if failure.kind == FailureKind::DiskFull && self.wait_for_disk(&failure, outcome) {
            return;
        }
        self.restart_after(&worker, PendingRestart::Failed(failure), outcome, last_step);
    }
}

/// The supervised `worker` ended.
pub(super) fn ended(worker: &LiveWorker, outcome: ExitOutcome) {
    tracing::info!(step = %worker.step, outcome = %outcome, "worker exited");
}
