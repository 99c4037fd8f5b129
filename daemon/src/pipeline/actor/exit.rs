//! A worker ended: a stop finished, a hung worker killed (restart it), or judged:
//! the next step, the step stopped from outside, or a failure for the policy
//! (`restart.rs`).

use lavender::status::{PipelineState, StepState};

use super::{Actor, PendingRestart, WorkerExit};
use crate::alert::Alert;
use crate::pipeline::inputs::StepInputs;
use crate::pipeline::judge::{Verdict, judge};
use crate::pipeline::record::StopCause;
use crate::pipeline::stop::{StopReport, StopReports as _};
use crate::pipeline::{markers, plan};

impl Actor {
    pub(super) fn on_exit(&mut self, exit: WorkerExit) {
        let Some(worker) = self.worker.take_if(|w| w.generation == exit.generation) else {
            return;
        };
        self.record.worker = None;
        let step = worker.step;
        tracing::info!(step = %step, outcome = %exit.outcome, "worker exited");

        if let Some(stopping) = self.stopping.take() {
            let report = StopReport::after_exit(
                stopping.step,
                &stopping.mark,
                &self.layout.checkpoints_root(),
                stopping.killed,
            );
            tracing::info!("{}", report.message);
            self.record.state = PipelineState::Stopped;
            self.record.set_step(step, StepState::Pending);
            self.commit();
            for waiter in stopping.waiters {
                let _ = waiter.send(report.clone());
            }
            if stopping.resume_after {
                self.resume_at_start(StopCause::DaemonExit);
            }
            return;
        }

        if let Some(hung) = self.hung.take() {
            let last_step = hung.report.step;
            self.restart_after(
                &worker,
                PendingRestart::Hung(hung.report),
                exit.outcome,
                last_step,
            );
            return;
        }

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
            self.fail_after(step, reason, Some(exit.outcome), None);
            return;
        }

        let judged = judge(
            step,
            exit.outcome,
            self.record.run_dir.as_deref(),
            &self.layout.data_root,
            Some(worker.started_at),
        );
        match judged.verdict {
            Verdict::Success => {
                let chunk = self.record.chunk.unwrap_or(self.config.chunk);
                let ran_with = plan::worker_config(&self.layout, &self.config);
                let inputs = StepInputs::with_files(
                    step,
                    &ran_with,
                    &self.layout.data_root,
                    chunk,
                    &exit.files,
                );
                if let Err(e) = markers::write(
                    &self.layout,
                    chunk,
                    step,
                    self.record.run_dir.as_deref(),
                    Some(inputs),
                ) {
                    tracing::error!("{e:#}");
                }
                self.record.set_step(step, StepState::Done);
                self.record.active_step = None;
                self.record.same_failure = None;
                self.advance();
            }
            Verdict::StoppedExternally => {
                self.record.state = PipelineState::Stopped;
                self.record.stop_cause = Some(StopCause::External);
                self.record.set_step(step, StepState::Pending);
                self.commit();
                self.alert(Alert::StoppedExternally { step });
            }
            Verdict::Failed { failure, .. } => {
                tracing::warn!(%step, kind = %failure.kind, "the worker failed: {}", failure.message);
                self.record.failure = Some(failure.clone());
                self.restart_after(
                    &worker,
                    PendingRestart::Failed(failure),
                    exit.outcome,
                    judged.last_step,
                );
            }
        }
    }
}
