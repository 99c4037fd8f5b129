//! A worker ended: a stop finished, or judged (a hung worker's kill: `effects.rs`):
//! the next step, the step stopped from outside, or a failure for the policy
//! (`restart.rs`).

use lavender::failure::FailureKind;

use super::{Actor, WorkerExit};
use crate::alert::Alert;
use crate::exit::ExitOutcome;
use crate::pipeline::judge::{Verdict, judge};
use crate::pipeline::machine::{Event, LiveWorker, PendingRestart, Stop};
use crate::pipeline::plan;
use crate::pipeline::stop::{StopReport, StopReports as _};
use lavender::pipeline_file::{RecordEvent, StopCause};
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

    /// The supervised `worker` ended: the record no longer names it.
    pub(super) fn ended(&mut self, worker: &LiveWorker, outcome: ExitOutcome) {
        self.record.apply(RecordEvent::WorkerEnded);
        tracing::info!(step = %worker.step, outcome = %outcome, "worker exited");
    }

    /// The worker of a stop ended: what it saved, to who asked.
    pub(super) fn stopped(&mut self, worker: LiveWorker, stop: Stop, outcome: ExitOutcome) {
        self.ended(&worker, outcome);
        let report = StopReport::after_exit(
            worker.step,
            &stop.mark,
            &self.layout.checkpoints_root(),
            stop.escalation.killed(),
        );
        tracing::info!("{}", report.message);
        self.record.apply(RecordEvent::StopDone {
            step: Some(worker.step),
        });
        self.commit();
        for waiter in stop.waiters {
            let _ = waiter.send(report.clone());
        }
        if stop.resume_after {
            self.resume_at_start(StopCause::DaemonExit);
        }
    }

    /// A running worker ended by itself: the next step, the step stopped from
    /// outside, or a failure for the policy.
    pub(super) fn judge_exit(
        &mut self,
        worker: LiveWorker,
        outcome: ExitOutcome,
        files: LocalFiles,
    ) {
        self.ended(&worker, outcome);
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
                self.record.apply(RecordEvent::StepDone { step });
                self.decisions.step_done(step);
                self.advance(None);
            }
            Verdict::StoppedExternally => {
                self.record.apply(RecordEvent::Stopped {
                    step: Some(step),
                    cause: StopCause::External,
                });
                self.commit();
                self.alert(Alert::StoppedExternally { step });
            }
            Verdict::Failed { failure, .. } => {
                tracing::warn!(%step, kind = %failure.kind, "the worker failed: {}", failure.message);
                self.record
                    .apply(RecordEvent::WorkerFailed(failure.clone()));
                if failure.kind == FailureKind::DamagedCheckpoint
                    && self.fall_back(&worker, &failure, outcome)
                {
                    return;
                }
                if failure.kind == FailureKind::DiskFull && self.wait_for_disk(&failure, outcome) {
                    return;
                }
                self.restart_after(
                    &worker,
                    PendingRestart::Failed(failure),
                    outcome,
                    judged.last_step,
                );
            }
        }
    }
}
