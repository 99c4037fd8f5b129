//! A stop: SIGTERM to the worker (it saves), SIGKILL when the stop timeout passes;
//! during a crash backoff, cancelling the restart is the stop. The record keeps
//! who asked (`StopCause`): an operator's stop stays stopped, the daemon's own
//! exit is resumed by its next start.

use std::time::Duration;

use lavender::config::PipelineStep;
use tokio::sync::oneshot;

use super::Actor;
use crate::pipeline::machine::Event;
use crate::pipeline::stop::{StopMark, StopReport, StopReports as _};
use crate::pipeline::timings::stop_timeout;
use lavender::pipeline_file::StopCause;

impl Actor {
    pub(super) fn stop(
        &mut self,
        timeout: Option<Duration>,
        cause: StopCause,
        reply: oneshot::Sender<StopReport>,
    ) {
        let timeout = timeout.unwrap_or(stop_timeout(&self.config.supervisor));
        let mark = StopMark::take(
            self.record.run_dir.as_deref(),
            &self.layout.checkpoints_root(),
        );
        self.on(Event::StopAsked {
            timeout,
            cause,
            reply,
            mark,
        });
    }

    /// The worker got its SIGTERM (the record says stopping, and who asked).
    pub(super) fn stop_begun(&mut self, timeout: Duration) {
        if let Some(worker) = self.phase.worker() {
            tracing::info!(worker = %worker.handle, step = %worker.step, ?timeout, "stopping: SIGTERM to the worker");
        }
        self.commit();
        self.decisions.stopped();
    }

    /// No worker yet (`sbatch` may take seconds): the pipeline stops now (the
    /// record says stopped), and the worker is cancelled when its launch returns.
    pub(super) fn stop_during_launch(
        &mut self,
        step: PipelineStep,
        reply: oneshot::Sender<StopReport>,
    ) {
        self.abandoned_launch
            .store(self.generation, std::sync::atomic::Ordering::Relaxed);
        self.stopped_without_worker();
        let root = self.layout.checkpoints_root();
        let run_dir = self.record.run_dir.as_deref();
        let _ = reply.send(StopReport::during_launch(step, &root, run_dir));
    }

    /// No worker: nothing to stop, or, crashed and waiting to restart, the restart
    /// `cancelled` (the record says stopped).
    pub(super) fn stop_without_worker(
        &mut self,
        cancelled: bool,
        reply: oneshot::Sender<StopReport>,
    ) {
        let root = self.layout.checkpoints_root();
        let mut report = StopReport::nothing_running(&root, self.record.run_dir.as_deref());
        if cancelled {
            self.stopped_without_worker();
            report.message = format!("cancelled the pending restart; {}", report.message);
        }
        let _ = reply.send(report);
    }

    /// Stopped with no worker to wait for: no restart follows; the stop is in the
    /// decision log and the record saved before the reply.
    fn stopped_without_worker(&mut self) {
        self.decisions.stopped();
        self.commit();
    }
}
