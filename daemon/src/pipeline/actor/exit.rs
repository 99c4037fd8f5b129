//! A worker ended: judged, then the next step, a restart after the backoff, or
//! the pipeline failed (restarts exhausted, or the worker cannot start).

use lavender::config::PipelineStep;
use lavender::status::{PipelineState, StepState};
use tokio::time::Instant;

use super::{Actor, WorkerExit};
use crate::alert::Alert;
use crate::exit::ExitOutcome;
use crate::pipeline::judge::{Verdict, judge};
use crate::pipeline::markers;
use crate::pipeline::stop::StopReport;

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
            return;
        }

        match judge(
            step,
            exit.outcome,
            self.record.run_dir.as_deref(),
            &self.layout.data_root,
            worker.started_at,
        ) {
            Verdict::Success => {
                let chunk = self.record.chunk.unwrap_or(self.config.chunk);
                if let Err(e) =
                    markers::write(&self.layout, chunk, step, self.record.run_dir.as_deref())
                {
                    tracing::error!("{e:#}");
                }
                self.record.set_step(step, StepState::Done);
                self.record.active_step = None;
                self.advance();
            }
            Verdict::StoppedExternally => {
                self.record.state = PipelineState::Stopped;
                self.record.set_step(step, StepState::Pending);
                self.commit();
                self.alert(Alert::StoppedExternally { step });
            }
            Verdict::Crash(reason) => self.crashed(step, exit.outcome, reason, worker.started),
        }
    }

    pub(super) fn crashed(
        &mut self,
        step: PipelineStep,
        outcome: ExitOutcome,
        reason: String,
        started: Instant,
    ) {
        if started.elapsed() >= self.timings.reset_after {
            // It made progress for long enough: this crash starts a fresh count.
            self.record.restarts = 0;
        }
        if self.record.restarts >= self.timings.max_restarts {
            self.fail_after(
                step,
                format!(
                    "{reason}; gave up after {} restart(s) (supervisor.max_restarts)",
                    self.record.restarts
                ),
                Some(outcome),
            );
            return;
        }
        self.record.restarts += 1;
        let delay = self.timings.backoff.before(self.record.restarts);
        self.record.state = PipelineState::Crashed;
        self.record.restart_pending = true;
        self.record.last_error = Some(reason);
        self.restart_at = Some(Instant::now() + delay);
        self.last_exit = Some(outcome);
        self.commit();
        self.alert(Alert::Crashed {
            step,
            outcome,
            restart: self.record.restarts,
            max_restarts: self.timings.max_restarts,
            restart_in: delay,
            log_file: self.record.log_file.clone(),
        });
    }

    pub(super) fn on_restart_due(&mut self) {
        self.restart_at = None;
        let Some(step) = self.record.active_step else {
            return;
        };
        self.spawn_step(step, true);
    }

    pub(super) fn fail(&mut self, step: PipelineStep, reason: String) {
        self.fail_after(step, reason, None);
    }

    pub(super) fn fail_after(
        &mut self,
        step: PipelineStep,
        reason: String,
        last_exit: Option<ExitOutcome>,
    ) {
        tracing::error!(%step, "{reason}");
        self.record.state = PipelineState::Failed;
        self.record.set_step(step, StepState::Failed);
        self.record.restart_pending = false;
        self.record.worker = None;
        self.record.last_error = Some(reason.clone());
        self.restart_at = None;
        self.last_exit = None;
        self.commit();
        self.alert(Alert::Failed {
            step,
            reason,
            restarts: self.record.restarts,
            last_exit,
        });
    }
}
