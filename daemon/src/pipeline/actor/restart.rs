//! A worker that failed or hung, as the policy decides (`pipeline/policy.rs`):
//! restarted from the run's latest complete checkpoint (the first restart at once,
//! the next ones after the backoff), or the pipeline failed with the cause.

use std::path::Path;

use lavender::config::PipelineStep;
use lavender::failure::{Failure, SameFailure};
use lavender::pipeline_file::RecordEvent;
use lavender::status::{Recovery, RecoveryReason};

use super::Actor;
use super::hung::hung_text;
use super::resume::resume_reason;
use crate::alert::{Alert, Repeats};
use crate::exit::ExitOutcome;
use crate::pipeline::machine::{Crash, Event, LiveWorker, PendingRestart, Relaunch, Restart};
use crate::pipeline::policy::{self, Cause, Decision, Streak};
use crate::pipeline::timings::reset_after;

impl Actor {
    /// `worker` ended (`why`); `last_step`: the training step it last reported.
    pub(super) fn restart_after(
        &mut self,
        worker: &LiveWorker,
        why: PendingRestart,
        outcome: ExitOutcome,
        last_step: Option<u64>,
    ) {
        let step = worker.step;
        // It ran long enough: this failure starts a fresh count.
        let count_reset = worker.started.elapsed() >= reset_after(&self.config.supervisor)
            && self.record.restarts > 0;
        let no_progress_restarts = Streak::no_progress_after(
            self.record.no_progress_restarts,
            worker.resumed_from_step,
            last_step,
        );
        // The same failure at the same place is counted whatever the timer says.
        let same_failure = match &why {
            PendingRestart::Failed(failure) => Some(SameFailure::after(
                self.record.same_failure.as_ref(),
                failure,
                failure.step.or(last_step),
                self.checkpoint_interval(),
            )),
            PendingRestart::Hung(_) | PendingRestart::RolledBack { .. } => None,
        };
        self.record.apply(RecordEvent::Counted {
            reset: count_reset,
            no_progress_restarts,
            same_failure,
        });
        let same_failure = self.record.same_failure.as_ref().map_or(0, |s| s.count);
        let streak = Streak {
            restarts: self.record.restarts,
            no_progress: self.record.no_progress_restarts,
            resumed_from: worker.resumed_from_step,
            same_failure,
            failed_at: self.record.same_failure.as_ref().and_then(|s| s.step),
        };
        let cause = match &why {
            PendingRestart::Hung(_) => Cause::Hung,
            PendingRestart::Failed(failure) | PendingRestart::RolledBack { failure, .. } => {
                Cause::Failed(failure)
            }
        };
        let failure = match &why {
            PendingRestart::Failed(failure) | PendingRestart::RolledBack { failure, .. } => {
                Some(failure.clone())
            }
            PendingRestart::Hung(_) => None,
        };
        let decision = policy::decide(step, &cause, streak, &self.config.supervisor);
        if !self.write_down(worker, &why, outcome, streak, &decision) {
            return;
        }
        match decision {
            Decision::Fail { reason, .. } => self.fail_after(step, reason, Some(outcome), failure),
            Decision::Rollback => match failure {
                Some(failure) => self.roll_back(step, failure, outcome, last_step),
                None => self.fail_after(
                    step,
                    "a rollback without a divergence".into(),
                    Some(outcome),
                    None,
                ),
            },
            Decision::Restart { restart, delay } => {
                let error = match &why {
                    PendingRestart::Hung(report) => hung_text(report),
                    PendingRestart::Failed(f) => f.message.clone(),
                    PendingRestart::RolledBack { message, .. } => message.clone(),
                };
                self.on(Event::RestartDecided {
                    delay,
                    restart: Restart {
                        why: Some(why),
                        last_exit: Some(outcome),
                    },
                    crash: Some(Crash {
                        error,
                        restarts: Some(restart),
                        rolled_back: None,
                    }),
                });
                self.commit();
                if let Some(failure) = failure {
                    self.alert(Alert::Crashed {
                        step,
                        outcome,
                        failure,
                        restart,
                        max_restarts: self.config.supervisor.max_restarts,
                        restart_in: delay,
                        log_file: self.record.log_file.clone(),
                        repeats: Repeats {
                            same_failure,
                            max_same_failure: self.config.supervisor.max_same_failure,
                            count_reset,
                        },
                    });
                }
            }
        }
    }

    /// The training steps between two checkpoints (the longest of the stages'):
    /// failures this close count as at the same place.
    fn checkpoint_interval(&self) -> u64 {
        self.config
            .training
            .stages
            .iter()
            .map(|s| s.checkpoint_every)
            .max()
            .unwrap_or(0)
    }

    /// The backoff passed: the active step launched again from its latest checkpoint.
    pub(super) fn on_restart_due(&mut self, restart: Restart) {
        let Some(step) = self.record.active_step else {
            return;
        };
        self.spawn_step(step, Some(Relaunch::Restart(restart)), None);
    }

    /// A worker the daemon launched again by itself runs: `pipeline.recovery` says
    /// why and from which checkpoint; the alert to raise, if any.
    pub(super) fn relaunched(
        &mut self,
        step: PipelineStep,
        why: Relaunch,
        from: Option<&Path>,
    ) -> Option<Alert> {
        let from_text = checkpoint_text(from);
        let (reason, message) = match &why {
            Relaunch::Restart(Restart {
                why: Some(PendingRestart::Hung(report)),
                ..
            }) => (
                RecoveryReason::Hung,
                format!(
                    "{}{}; restarted from {from_text}",
                    hung_text(report),
                    self.hang_bundle_text()
                ),
            ),
            Relaunch::Restart(Restart {
                why: Some(PendingRestart::Failed(f)),
                ..
            }) => (
                RecoveryReason::Failed,
                format!("{}: {}; restarted from {from_text}", f.kind, f.message),
            ),
            Relaunch::Restart(Restart {
                why: Some(PendingRestart::RolledBack { message, .. }),
                ..
            }) => (
                RecoveryReason::RolledBack,
                format!("{message}; restarted from {from_text}"),
            ),
            // Decided by a daemon before this one.
            Relaunch::Restart(Restart { why: None, .. }) => (
                RecoveryReason::Failed,
                format!(
                    "{}; restarted from {from_text}",
                    self.record
                        .last_error
                        .as_deref()
                        .unwrap_or("the worker failed")
                ),
            ),
            Relaunch::Resume(cause) => {
                let (reason, said) = resume_reason(*cause);
                (reason, format!("{said}; resumed from {from_text}"))
            }
        };
        tracing::info!(%step, "{message}");
        self.record
            .apply(RecordEvent::Recovered(recovery(reason, &message, from)));
        match why {
            Relaunch::Restart(Restart {
                why: Some(PendingRestart::Hung(_)),
                ..
            }) => Some(Alert::HungRestarted { step, message }),
            Relaunch::Resume(_) => Some(Alert::Resumed {
                step,
                reason,
                message,
            }),
            Relaunch::Restart(_) => None,
        }
    }

    /// The pipeline fails at `step`: the policy gave up on its worker.
    pub(super) fn fail_after(
        &mut self,
        step: PipelineStep,
        reason: String,
        last_exit: Option<ExitOutcome>,
        failure: Option<Failure>,
    ) {
        self.on(Event::GaveUp {
            step,
            reason,
            last_exit,
            failure,
        });
    }

    /// The pipeline failed at `step` (the record says so): logged, saved, told.
    pub(super) fn failed(
        &mut self,
        step: PipelineStep,
        reason: String,
        last_exit: Option<ExitOutcome>,
        failure: Option<Failure>,
    ) {
        tracing::error!(%step, "{reason}");
        self.commit();
        self.alert(Alert::Failed {
            step,
            reason,
            restarts: self.record.restarts,
            last_exit,
            failure,
        });
    }
}

/// The checkpoint's name, or what starting without one means.
pub(super) fn checkpoint_text(checkpoint: Option<&Path>) -> String {
    match checkpoint.and_then(|p| p.file_name()) {
        Some(name) => name.to_string_lossy().into_owned(),
        None => "the start (no checkpoint yet)".to_string(),
    }
}

/// `pipeline.recovery` for what was just done.
pub(super) fn recovery(reason: RecoveryReason, message: &str, from: Option<&Path>) -> Recovery {
    Recovery {
        reason,
        message: message.to_string(),
        at: lavender::time::rfc3339_z(lavender::time::now_utc()),
        checkpoint: from
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned()),
    }
}
