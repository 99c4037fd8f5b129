//! At daemon start, a pipeline that the previous daemon's exit interrupted
//! (SIGTERM/SIGINT: a service restart, a shutdown), or that went down with its
//! worker (a power loss), resumes from its run's latest complete checkpoint by
//! itself (`supervisor.resume_on_start`); with that off it stays stopped and the
//! log says so. An operator's stop is never resumed.

use lavender::pipeline_file::RecordEvent;
use lavender::status::RecoveryReason;

use super::Actor;
use crate::pipeline::machine::Relaunch;
use lavender::pipeline_file::StopCause;

impl Actor {
    pub(super) fn resume_at_start(&mut self, cause: StopCause) {
        let Some(step) = self.record.next_step() else {
            return;
        };
        if !self.config.supervisor.resume_on_start {
            let (_, why) = resume_reason(cause);
            self.record.apply(RecordEvent::Stopped {
                step: Some(step),
                cause,
            });
            self.commit();
            tracing::warn!(
                "the pipeline stopped at step {step}, {why}; resume on start is off \
                 (supervisor.resume_on_start), so it stays stopped: `lavenderd start --resume latest` continues it"
            );
            return;
        }
        // `relaunched` (restart.rs) says so once the worker runs.
        self.spawn_step(step, Some(Relaunch::Resume(cause)), None);
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
