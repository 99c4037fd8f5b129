//! At daemon start, a pipeline that the previous daemon's exit interrupted
//! (SIGTERM/SIGINT: a service restart, a shutdown), or that went down with its
//! worker (a power loss), resumes from its run's latest complete checkpoint by
//! itself (`supervisor.resume_on_start`); with that off it stays stopped and the
//! log says so. An operator's stop is never resumed.

use lavender::config::PipelineStep;
use lavender::status::RecoveryReason;

use super::Actor;
use crate::pipeline::machine::{Event, Relaunch};
use lavender::pipeline_file::StopCause;

impl Actor {
    pub(super) fn resume_at_start(&mut self, cause: StopCause) {
        self.on(Event::ResumeAsked {
            cause,
            resume_on_start: self.config.supervisor.resume_on_start,
        });
    }

    /// The interrupted pipeline's `step` launched again; `relaunched` (restart.rs)
    /// says so once the worker runs.
    pub(super) fn resume(&mut self, step: PipelineStep, cause: StopCause) {
        self.spawn_step(step, Some(Relaunch::Resume(cause)), None);
    }

    /// Resume on start is off: the pipeline stays stopped (the record says so).
    pub(super) fn stays_stopped(&mut self, step: PipelineStep, cause: StopCause) {
        self.commit();
        let (_, why) = resume_reason(cause);
        tracing::warn!(
            "the pipeline stopped at step {step}, {why}; resume on start is off \
             (supervisor.resume_on_start), so it stays stopped: `lavenderd start --resume latest` continues it"
        );
    }
}

/// Why an interrupted pipeline resumes, for the status and in words.
pub(super) fn resume_reason(cause: StopCause) -> (RecoveryReason, &'static str) {
    match cause {
        StopCause::DaemonExit => (
            RecoveryReason::DaemonExit,
            "interrupted by the daemon's exit (SIGTERM/SIGINT)",
        ),
        _ => (
            RecoveryReason::PowerLoss,
            "the daemon and the worker were gone without a word (a power loss, a reboot, or both killed)",
        ),
    }
}
