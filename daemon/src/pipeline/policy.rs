//! What a worker that failed or hung gets. A failure that will repeat (a config
//! the worker rejects, a checkpoint that does not fit, missing data) fails the
//! pipeline at once with the cause and the fix; a divergence goes to
//! `on_diverged`; anything else is restarted from the latest complete checkpoint,
//! the first restart at once and the next ones after `restart_backoff_s`, until
//! `max_restarts` restarts in a row, `max_no_progress_restarts` restarts in a row
//! that did not train past the step they resumed from, or `max_same_failure` workers
//! in a row that ended with the same failure at the same place. Pure: the actor acts
//! on the [`Decision`].

use std::time::Duration;

use lavender::config::{FailureAction, OnDiverged, PipelineStep, SupervisorConfig};
use lavender::failure::{Failure, FailureKind};

use super::timings;
use crate::decisions::Rule;

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Restart number `restart` in a row, after `delay` (zero for the first).
    Restart { restart: u32, delay: Duration },
    /// `on_diverged: rollback`: back to the checkpoint before the divergence.
    Rollback,
    /// The pipeline fails; `reason` says why and what to do; `rule`: the key that
    /// made it fail (for the decision log).
    Fail { reason: String, rule: Rule },
}

/// Why a worker is to be restarted.
#[derive(Debug, Clone, PartialEq)]
pub enum Cause<'a> {
    /// It ended with this failure.
    Failed(&'a Failure),
    /// It stopped beating and was killed (`on_stall: restart`).
    Hung,
}

/// Restarts so far, with the worker that just ended counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streak {
    /// Restarts in a row before this one.
    pub restarts: u32,
    /// Restarts in a row whose worker did not train past the step it resumed from.
    pub no_progress: u32,
    /// The step the no-progress workers resumed from.
    pub resumed_from: Option<u64>,
    /// Workers in a row that ended with this same failure, this one included
    /// (see [`SameFailure`](lavender::failure::SameFailure)); 0 for a hang.
    pub same_failure: u32,
    /// The training step the worker that just ended failed at, as far as known.
    pub failed_at: Option<u64>,
}

impl Streak {
    /// The no-progress count after a worker that resumed from `resumed_from` (none:
    /// it was not a restart) and last reported `last_step` ended.
    pub fn no_progress_after(
        previous: u32,
        resumed_from: Option<u64>,
        last_step: Option<u64>,
    ) -> u32 {
        match resumed_from {
            Some(from) if last_step.is_none_or(|s| s <= from) => previous + 1,
            _ => 0,
        }
    }
}

/// `step`: the pipeline step whose worker ended (the fix of a failure depends on it).
pub fn decide(
    step: PipelineStep,
    cause: &Cause,
    streak: Streak,
    sup: &SupervisorConfig,
) -> Decision {
    let what = match cause {
        Cause::Failed(failure) => {
            let action = match sup.on_failure.action(failure.kind) {
                Some(action) => action,
                None => match sup.on_diverged {
                    OnDiverged::Rollback => return Decision::Rollback,
                    OnDiverged::Fail => FailureAction::Fail,
                },
            };
            if action == FailureAction::Fail {
                let rule = match failure.kind {
                    FailureKind::Diverged => Rule::new("supervisor.on_diverged", "fail"),
                    kind => Rule::new(format!("supervisor.on_failure.{kind}"), "fail"),
                };
                return Decision::Fail {
                    reason: cause_and_fix(step, failure),
                    rule,
                };
            }
            failure.message.clone()
        }
        Cause::Hung => "the worker hung".to_string(),
    };
    if streak.no_progress >= sup.max_no_progress_restarts {
        return Decision::Fail {
            reason: format!(
                "{what}; {} restart(s) in a row did not train past step {} (supervisor.max_no_progress_restarts), so the failure would repeat",
                streak.no_progress,
                streak.resumed_from.unwrap_or(0)
            ),
            rule: Rule::new(
                "supervisor.max_no_progress_restarts",
                sup.max_no_progress_restarts,
            ),
        };
    }
    if let Cause::Failed(failure) = cause
        && streak.same_failure >= sup.max_same_failure
    {
        return Decision::Fail {
            reason: same_failure_text(failure, streak),
            rule: Rule::new("supervisor.max_same_failure", sup.max_same_failure),
        };
    }
    if streak.restarts >= sup.max_restarts {
        return Decision::Fail {
            reason: format!(
                "{what}; gave up after {} restart(s) (supervisor.max_restarts)",
                streak.restarts
            ),
            rule: Rule::new("supervisor.max_restarts", sup.max_restarts),
        };
    }
    let restart = streak.restarts + 1;
    Decision::Restart {
        restart,
        delay: timings::restart_delay(sup, restart),
    }
}

/// The same failure `count` times in a row, in one line: where, what, what to do.
fn same_failure_text(failure: &Failure, streak: Streak) -> String {
    let count = streak.same_failure;
    let at = match failure.step.or(streak.failed_at) {
        Some(step) => format!(" at step {step}"),
        None => String::new(),
    };
    format!(
        "the same failure {count} times in a row{at} ({}: {}), so restarting will not help (supervisor.max_same_failure); to fix: read the log around that step (lavenderd logs), correct the cause (code, data or config), then start again with --resume latest",
        failure.kind, failure.message
    )
}

/// A failure that will repeat, in one line: what happened and what to do. A data
/// step's worker says in its message what is wrong and what to do about it.
pub fn cause_and_fix(step: PipelineStep, failure: &Failure) -> String {
    if step != PipelineStep::Train {
        let cause = match failure.kind {
            FailureKind::Config => format!("step {step} rejected its config"),
            FailureKind::Data => format!("step {step} found its input data missing or corrupt"),
            FailureKind::OutOfMemory => format!("step {step} ran out of memory"),
            _ => format!("step {step} failed"),
        };
        return format!(
            "{cause}: {}; to fix: do what the message says (the worker's log: lavenderd logs), then start again (the steps already done are not run again)",
            failure.message
        );
    }
    let (cause, fix) = match failure.kind {
        FailureKind::Config => (
            "the worker rejected its config",
            "correct the config (or worker.command's arguments), then start again",
        ),
        FailureKind::IncompatibleCheckpoint => (
            "the checkpoint does not fit the configured model",
            "resume with the config it was trained with, or start without --resume",
        ),
        FailureKind::DamagedCheckpoint => (
            "no intact checkpoint is left to resume from",
            "restore a checkpoint from a backup (the damaged ones are under the run's damaged/ folder), or start without --resume",
        ),
        FailureKind::MissingRunFile => (
            "the checkpoint is intact but its run folder lacks a file its resume reads",
            "bring that file back (`lavenderd pull RUN CHECKPOINT` restores it with the checkpoint when a remote copy has it), or resume from a checkpoint taken before the stage that needs it",
        ),
        FailureKind::Data => (
            "the training data is missing or corrupt",
            "rebuild it (remove the step's done-marker under state/done/ and start again) or restore it",
        ),
        FailureKind::Diverged => (
            "the loss diverged",
            "lower the learning rate, or set supervisor.on_diverged: rollback",
        ),
        FailureKind::OutOfMemory => (
            "the worker ran out of memory",
            "lower training.batch_size or training.seq_len, or pick a smaller scale",
        ),
        FailureKind::DiskFull => (
            "the disk is full",
            "free space on the data root's filesystem, or lower training.keep_checkpoints, then start again with --resume latest",
        ),
        FailureKind::Crash => ("the worker crashed", "read the log (lavenderd logs)"),
    };
    format!("{cause}: {}; to fix: {fix}", failure.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::failure::SameFailure;

    fn sup() -> SupervisorConfig {
        let mut s = lavender::config::Config::default().supervisor;
        s.max_restarts = 3;
        s.max_no_progress_restarts = 2;
        s.restart_backoff_s = vec![10.0, 30.0];
        s
    }

    fn streak(restarts: u32, no_progress: u32) -> Streak {
        Streak {
            restarts,
            no_progress,
            resumed_from: Some(40),
            same_failure: 1,
            failed_at: None,
        }
    }

    fn failure(kind: FailureKind) -> Failure {
        Failure::new(kind, "boom")
    }

    #[test]
    fn failures_that_repeat_fail_at_once_naming_cause_and_fix() {
        let s = sup();
        for kind in [
            FailureKind::Config,
            FailureKind::IncompatibleCheckpoint,
            FailureKind::Data,
        ] {
            match decide(
                PipelineStep::Train,
                &Cause::Failed(&failure(kind)),
                streak(0, 0),
                &s,
            ) {
                Decision::Fail { reason, .. } => {
                    assert!(
                        reason.contains("boom") && reason.contains("to fix:"),
                        "{reason}"
                    )
                }
                other => panic!("{kind}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_crash_restarts_at_once_then_after_the_backoff() {
        let s = sup();
        let crash = failure(FailureKind::Crash);
        let delays: Vec<Duration> = (0..3)
            .map(|n| {
                match decide(
                    PipelineStep::Train,
                    &Cause::Failed(&crash),
                    streak(n, 0),
                    &s,
                ) {
                    Decision::Restart { restart, delay } => {
                        assert_eq!(restart, n + 1);
                        delay
                    }
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        assert_eq!(
            delays,
            [
                Duration::ZERO,
                Duration::from_secs(10),
                Duration::from_secs(30)
            ]
        );
        assert!(matches!(
            decide(PipelineStep::Train, &Cause::Failed(&crash), streak(3, 0), &s),
            Decision::Fail { reason, .. } if reason.contains("supervisor.max_restarts")
        ));
        // A hang restarts the same way, whatever on_failure says of crashes.
        let mut never = s.clone();
        never.on_failure.crash = FailureAction::Fail;
        assert!(matches!(
            decide(PipelineStep::Train, &Cause::Hung, streak(0, 0), &never),
            Decision::Restart { restart: 1, .. }
        ));
    }

    #[test]
    fn restarts_without_progress_fail() {
        let s = sup();
        assert_eq!(Streak::no_progress_after(0, None, Some(3)), 0);
        assert_eq!(Streak::no_progress_after(1, Some(40), Some(40)), 2);
        assert_eq!(Streak::no_progress_after(1, Some(40), None), 2);
        assert_eq!(Streak::no_progress_after(1, Some(40), Some(41)), 0);
        let crash = failure(FailureKind::Crash);
        assert!(matches!(
            decide(
                PipelineStep::Train,
                &Cause::Failed(&crash),
                streak(1, 1),
                &s,
            ),
            Decision::Restart { .. }
        ));
        match decide(
            PipelineStep::Train,
            &Cause::Failed(&crash),
            streak(2, 2),
            &s,
        ) {
            Decision::Fail { reason, .. } => assert!(
                reason.contains("did not train past step 40")
                    && reason.contains("max_no_progress_restarts"),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn divergence_follows_on_diverged_and_memory_on_failure() {
        let mut s = sup();
        let diverged = failure(FailureKind::Diverged);
        assert_eq!(
            decide(
                PipelineStep::Train,
                &Cause::Failed(&diverged),
                streak(0, 0),
                &s,
            ),
            Decision::Rollback
        );
        s.on_diverged = OnDiverged::Fail;
        assert!(matches!(
            decide(PipelineStep::Train, &Cause::Failed(&diverged), streak(0, 0), &s),
            Decision::Fail { reason, .. } if reason.contains("diverged")
        ));
        let oom = failure(FailureKind::OutOfMemory);
        assert!(matches!(
            decide(PipelineStep::Train, &Cause::Failed(&oom), streak(0, 0), &s,),
            Decision::Restart { .. }
        ));
        s.on_failure.out_of_memory = FailureAction::Fail;
        assert!(matches!(
            decide(PipelineStep::Train, &Cause::Failed(&oom), streak(0, 0), &s),
            Decision::Fail { reason, .. } if reason.contains("out of memory")
        ));
    }

    #[test]
    fn the_same_failure_at_the_same_place_fails_whatever_the_restart_count() {
        let s = sup();
        let boom = failure(FailureKind::Crash);
        let first = SameFailure::after(None, &boom, Some(137), 20);
        assert_eq!(first.count, 1);
        let second = SameFailure::after(Some(&first), &boom, Some(137), 20);
        assert_eq!(second.count, 2);
        // Another message, another kind, or far from the last: a new count.
        let other = Failure::new(FailureKind::Crash, "another");
        assert_eq!(
            SameFailure::after(Some(&second), &other, Some(137), 20).count,
            1
        );
        let oom = Failure::new(FailureKind::OutOfMemory, "boom");
        assert_eq!(
            SameFailure::after(Some(&second), &oom, Some(137), 20).count,
            1
        );
        assert_eq!(
            SameFailure::after(Some(&second), &boom, Some(300), 20).count,
            1
        );
        assert_eq!(
            SameFailure::after(Some(&second), &boom, Some(150), 20).count,
            3
        );
        // The restart count reset (attempts longer than restart_reset_after_s): still fails.
        let third = Streak {
            same_failure: 3,
            failed_at: Some(137),
            ..streak(0, 0)
        };
        match decide(PipelineStep::Train, &Cause::Failed(&boom), third, &s) {
            Decision::Fail { reason, .. } => assert!(
                reason.contains("the same failure 3 times in a row at step 137")
                    && reason.contains("boom")
                    && reason.contains("supervisor.max_same_failure")
                    && reason.contains("to fix:"),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
        let twice = Streak {
            same_failure: 2,
            ..streak(0, 0)
        };
        assert!(matches!(
            decide(PipelineStep::Train, &Cause::Failed(&boom), twice, &s),
            Decision::Restart { restart: 1, .. }
        ));
    }

    #[test]
    fn a_data_step_failure_says_the_workers_message_and_a_fix_that_applies() {
        let s = sup();
        let missing = Failure::new(
            FailureKind::Data,
            "documents/ is missing: run the downloads step first",
        );
        match decide(
            PipelineStep::Dedup,
            &Cause::Failed(&missing),
            streak(0, 0),
            &s,
        ) {
            Decision::Fail { reason, .. } => {
                assert!(
                    reason.starts_with("step dedup found its input data missing or corrupt: documents/ is missing: run the downloads step first; to fix:"),
                    "{reason}"
                );
                assert!(!reason.contains("done-marker"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
