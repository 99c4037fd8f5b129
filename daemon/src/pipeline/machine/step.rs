//! The transition function: no I/O, the clock passed in.

use tokio::time::Instant;

use super::effect::{Effect, KillReason};
use super::event::Event;
use super::phase::{DiskWaiting, Escalation, LiveWorker, Phase, Relaunch, Restart, Stop};

/// The phase after `event` at `now`, and what the actor is to do about it, in order.
pub(crate) fn step(phase: Phase, event: Event, now: Instant) -> (Phase, Vec<Effect>) {
    match event {
        Event::LaunchAsked {
            launch,
            spec,
            start,
        } => match phase {
            Phase::Idle => {
                let generation = launch.generation;
                (
                    Phase::Launching { launch, start },
                    vec![Effect::Launch { generation, spec }],
                )
            }
            // A start is refused while a pipeline is active, and the daemon launches
            // only from `Idle`: nothing to launch; the start is answered as it is.
            busy => (busy, start.map(Effect::AnswerStart).into_iter().collect()),
        },

        Event::LaunchFinished { generation, result } => match phase {
            Phase::Launching { launch, start } if launch.generation == generation => {
                let start = start.map(Effect::AnswerStart);
                match result {
                    Ok(handle) => {
                        let worker = LiveWorker {
                            generation,
                            handle,
                            step: launch.step,
                            started: now,
                            started_at: launch.started_at,
                            own_child: true,
                            resumed_from_step: launch.resumed_from_step,
                        };
                        let effects = [Effect::Supervise { launch }].into_iter().chain(start);
                        (Phase::Running { worker }, effects.collect())
                    }
                    Err(reason) => {
                        let (last_exit, failure) = match launch.relaunch {
                            Some(Relaunch::Restart(Restart { why, last_exit })) => {
                                (last_exit, why.as_ref().and_then(|w| w.failure()).cloned())
                            }
                            _ => (None, None),
                        };
                        let failed = Effect::LaunchFailed {
                            step: launch.step,
                            reason,
                            last_exit,
                            failure,
                        };
                        (Phase::Idle, [failed].into_iter().chain(start).collect())
                    }
                }
            }
            // A launch the pipeline no longer waits for (a stop came first).
            other => {
                let cancel = result.ok().map(|handle| Effect::Cancel { handle });
                (other, cancel.into_iter().collect())
            }
        },

        Event::WorkerExited {
            generation,
            outcome,
            files,
        } => match phase {
            Phase::Running { worker } if worker.generation == generation => (
                Phase::Idle,
                vec![Effect::Judge {
                    worker,
                    outcome,
                    files,
                }],
            ),
            Phase::Stopping { worker, stop } if worker.generation == generation => (
                Phase::Idle,
                vec![Effect::Stopped {
                    worker,
                    stop,
                    outcome,
                }],
            ),
            Phase::KillingHung { worker, report, .. } if worker.generation == generation => (
                Phase::Idle,
                vec![Effect::HungEnded {
                    worker,
                    report,
                    outcome,
                }],
            ),
            // A worker no longer supervised.
            other => (other, Vec::new()),
        },

        Event::HungJudged { report, grace } => match phase {
            Phase::Running { worker } if worker.handle.same_as(&report.worker) => {
                // A Slurm job waiting in the queue (requeued after a lost node or at
                // its time limit) runs nothing that could beat.
                let queued = worker
                    .handle
                    .slurm_job()
                    .is_some_and(|j| j.state.as_deref().is_some_and(|s| s != "RUNNING"));
                if queued {
                    let handle = worker.handle.clone();
                    return (
                        Phase::Running { worker },
                        vec![Effect::QueuedNotHung { handle }],
                    );
                }
                let effects = vec![
                    Effect::Terminate {
                        handle: worker.handle.clone(),
                        own_child: worker.own_child,
                    },
                    Effect::HungKillBegun {
                        report: report.clone(),
                        grace,
                    },
                ];
                let escalation = Escalation::Term {
                    kill_at: now + grace,
                };
                (
                    Phase::KillingHung {
                        worker,
                        escalation,
                        report,
                    },
                    effects,
                )
            }
            // About a worker that already ended, or one being stopped or killed.
            other => (other, Vec::new()),
        },

        Event::StopAsked {
            timeout,
            cause,
            reply,
            mark,
        } => match phase {
            // A hung worker being killed is stopped instead: no restart follows.
            Phase::Running { worker } | Phase::KillingHung { worker, .. } => {
                let effects = vec![
                    Effect::Terminate {
                        handle: worker.handle.clone(),
                        own_child: worker.own_child,
                    },
                    Effect::StopBegun { cause, timeout },
                ];
                let stop = Stop {
                    escalation: Escalation::Term {
                        kill_at: now + timeout,
                    },
                    waiters: vec![reply],
                    mark,
                    resume_after: false,
                };
                (Phase::Stopping { worker, stop }, effects)
            }
            Phase::Stopping { worker, mut stop } => {
                stop.waiters.push(reply);
                (Phase::Stopping { worker, stop }, Vec::new())
            }
            // No worker yet: the pipeline stops now; the launch is cancelled once back.
            Phase::Launching { launch, start } => {
                let stopped = Effect::StopDuringLaunch {
                    step: launch.step,
                    cause,
                    reply,
                };
                let start = start.map(Effect::AnswerStart);
                (Phase::Idle, [stopped].into_iter().chain(start).collect())
            }
            // Crashed and waiting to restart, or waiting for disk space: cancelling
            // the restart is the stop.
            Phase::Idle | Phase::BackingOff { .. } | Phase::WaitingForDisk { .. } => (
                Phase::Idle,
                vec![Effect::StopWithoutWorker { cause, reply }],
            ),
        },

        Event::RestartDecided { delay, restart } => match phase {
            Phase::Idle => (
                Phase::BackingOff {
                    at: now + delay,
                    restart,
                },
                Vec::new(),
            ),
            // Decided only once a worker ended, from `Idle`.
            other => (other, Vec::new()),
        },

        Event::Adopted { worker, stop } => match (phase, stop) {
            (Phase::Idle, None) => (Phase::Running { worker }, Vec::new()),
            (Phase::Idle, Some(stop)) => (Phase::Stopping { worker, stop }, Vec::new()),
            // Only at daemon start, from `Idle`.
            (other, _) => (other, Vec::new()),
        },

        Event::TimerFired => match phase {
            Phase::Stopping { worker, mut stop }
                if stop.escalation.kill_at().is_some_and(|at| now >= at) =>
            {
                stop.escalation = Escalation::Killed;
                let kill = Effect::Kill {
                    handle: worker.handle.clone(),
                    own_child: worker.own_child,
                    reason: KillReason::StopTimeout,
                };
                (Phase::Stopping { worker, stop }, vec![kill])
            }
            Phase::KillingHung {
                worker,
                escalation,
                report,
            } if escalation.kill_at().is_some_and(|at| now >= at) => {
                let kill = Effect::Kill {
                    handle: worker.handle.clone(),
                    own_child: worker.own_child,
                    reason: KillReason::HungGrace,
                };
                let killing = Phase::KillingHung {
                    worker,
                    escalation: Escalation::Killed,
                    report,
                };
                (killing, vec![kill])
            }
            Phase::BackingOff { at, restart } if now >= at => {
                (Phase::Idle, vec![Effect::RestartDue(restart)])
            }
            Phase::WaitingForDisk { mut wait } if wait.check_at.is_some_and(|at| now >= at) => {
                wait.check_at = None;
                (
                    Phase::WaitingForDisk { wait },
                    vec![Effect::CheckDisk { first: false }],
                )
            }
            other => (other, Vec::new()),
        },

        Event::DiskFullJudged { mut wait } => match phase {
            // Judged only once a worker ended, from `Idle`; checked at once.
            Phase::Idle => {
                wait.check_at = None;
                (
                    Phase::WaitingForDisk { wait },
                    vec![Effect::CheckDisk { first: true }],
                )
            }
            other => (other, Vec::new()),
        },

        Event::DiskChecked(check) => match phase {
            Phase::WaitingForDisk { wait } if wait.check_at.is_none() && check.for_wait => {
                if check.fits() {
                    let back = Effect::DiskBack {
                        check,
                        restart: wait.restart,
                        told: wait.told,
                    };
                    return (Phase::Idle, vec![back]);
                }
                let first = !wait.told;
                let wait = DiskWaiting {
                    check_at: Some(now + wait.every),
                    told: true,
                    ..wait
                };
                (
                    Phase::WaitingForDisk { wait },
                    vec![Effect::DiskStillFull { check, first }],
                )
            }
            Phase::Running { worker } => (
                Phase::Running { worker },
                vec![Effect::DiskCheckedRunning(check)],
            ),
            // A check the pipeline no longer waits for (stopped meanwhile), or one
            // asked while the worker ran that came back after it ended.
            other => (other, Vec::new()),
        },
    }
}
