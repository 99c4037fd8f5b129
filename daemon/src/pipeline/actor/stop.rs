//! A stop: SIGTERM to the worker (it saves), SIGKILL when the stop timeout passes;
//! during a crash backoff, cancelling the restart is the stop. The record keeps
//! who asked (`StopCause`): an operator's stop stays stopped, the daemon's own
//! exit is resumed by its next start.

use std::time::Duration;

use lavender::status::{PipelineState, StepState};
use nix::sys::signal::Signal;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Actor, Stopping};
use crate::pipeline::record::StopCause;
use crate::pipeline::stop::{StopMark, StopReport, StopReports as _};

impl Actor {
    pub(super) fn stop(
        &mut self,
        timeout: Option<Duration>,
        cause: StopCause,
        reply: oneshot::Sender<StopReport>,
    ) {
        if let Some(stopping) = &mut self.stopping {
            stopping.waiters.push(reply);
            return;
        }
        let root = self.layout.checkpoints_root();
        if let Some(launching) = self.launching.take() {
            // No worker yet (`sbatch` may take seconds): the pipeline stops now, and the
            // worker is cancelled when its launch returns (see `on_launched`).
            self.restart_at = None;
            self.last_exit = None;
            self.pending = None;
            self.record.restart_pending = false;
            self.record.state = PipelineState::Stopped;
            self.record.stop_cause = Some(cause);
            self.record.set_step(launching.step, StepState::Pending);
            self.commit();
            let run_dir = self.record.run_dir.as_deref();
            let _ = reply.send(StopReport::during_launch(launching.step, &root, run_dir));
            self.answer_start();
            return;
        }
        let Some(worker) = &self.worker else {
            let mut report = StopReport::nothing_running(&root, self.record.run_dir.as_deref());
            if self.record.restart_pending {
                // Crashed and waiting to restart: cancelling the restart is the stop.
                self.restart_at = None;
                self.last_exit = None;
                self.pending = None;
                self.record.restart_pending = false;
                self.record.state = PipelineState::Stopped;
                self.record.stop_cause = Some(cause);
                if let Some(step) = self.record.active_step {
                    self.record.set_step(step, StepState::Pending);
                }
                self.commit();
                report.message = format!("cancelled the pending restart; {}", report.message);
            }
            let _ = reply.send(report);
            return;
        };
        let mark = StopMark::take(self.record.run_dir.as_deref(), &root);
        let timeout = timeout.unwrap_or(self.timings.stop_timeout);
        tracing::info!(worker = %worker.handle, step = %worker.step, ?timeout, "stopping: SIGTERM to the worker");
        self.backend
            .signal(&worker.handle, Signal::SIGTERM, worker.own_child);
        self.stopping = Some(Stopping {
            deadline: Instant::now() + timeout,
            killed: false,
            waiters: vec![reply],
            mark,
            step: worker.step,
            resume_after: false,
        });
        // A hung worker being killed is stopped instead: no restart follows.
        self.hung = None;
        self.record.state = PipelineState::Stopping;
        self.record.stop_cause = Some(cause);
        self.commit();
    }

    /// The stop timeout passed: SIGKILL the group.
    pub(super) fn escalate(&mut self) {
        let (Some(stopping), Some(worker)) = (&mut self.stopping, &self.worker) else {
            return;
        };
        if stopping.killed || Instant::now() < stopping.deadline {
            return;
        }
        tracing::warn!(
            worker = %worker.handle,
            "the worker did not exit within the stop timeout; SIGKILL"
        );
        self.backend
            .signal(&worker.handle, Signal::SIGKILL, worker.own_child);
        stopping.killed = true;
    }
}
