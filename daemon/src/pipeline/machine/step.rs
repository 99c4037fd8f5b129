//! The transition function: no I/O, the clock passed in.

use tokio::time::Instant;

use lavender::pipeline_file::{PipelineRecord, RecordEvent, StopCause, WorkerHandle, WorkerRecord};

use super::effect::{Effect, KillReason};
use super::event::{Crash, Event, Found};
use super::phase::{
    DiskWaiting, Escalation, LiveWorker, PendingStart, Phase, Relaunch, Restart, Stop,
};
use crate::pipeline::judge::Verdict;

/// The phase after `event` at `now`, and what the actor is to do about it, in order.
/// `record`: the pipeline's record as it is; what the event changes in it is among
/// the effects (`Effect::Record`), so the table test shows what the status says
/// after each event.
pub(crate) fn step(
    phase: Phase,
    record: &PipelineRecord,
    event: Event,
    now: Instant,
) -> (Phase, Vec<Effect>) {
    use Effect::Record;
    match event {
        Event::StartPrepared { record: new, start } => match phase {
            Phase::Idle => {
                let next = advance(&new, Some(start));
                let started = Record(RecordEvent::Started(new));
                (Phase::Idle, [started].into_iter().chain(next).collect())
            }
            // A start is refused while a pipeline is active: answered as it is.
            busy => (busy, vec![Effect::AnswerStart(start)]),
        },

        Event::BetweenSteps => match phase {
            Phase::Idle => (Phase::Idle, advance(record, None)),
            other => (other, Vec::new()),
        },

        Event::GaveUp {
            step,
            reason,
            last_exit,
            failure,
        } => (
            phase,
            vec![
                Record(RecordEvent::Failed {
                    step,
                    reason: reason.clone(),
                }),
                Effect::Failed {
                    step,
                    reason,
                    last_exit,
                    failure,
                },
            ],
        ),

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
                        let running = Record(RecordEvent::WorkerRunning(WorkerRecord {
                            handle: handle.clone(),
                            step: launch.step,
                            started_at: launch.started_at,
                            resumed_from_step: launch.resumed_from_step,
                        }));
                        let worker = LiveWorker {
                            generation,
                            handle,
                            step: launch.step,
                            started: now,
                            started_at: launch.started_at,
                            own_child: true,
                            resumed_from_step: launch.resumed_from_step,
                        };
                        let effects = [running, Effect::Supervise { launch }]
                            .into_iter()
                            .chain(start);
                        (Phase::Running { worker }, effects.collect())
                    }
                    Err(reason) => {
                        let (last_exit, failure) = match launch.relaunch {
                            Some(Relaunch::Restart(Restart { why, last_exit })) => {
                                (last_exit, why.as_ref().and_then(|w| w.failure()).cloned())
                            }
                            _ => (None, None),
                        };
                        let shown = Record(RecordEvent::Failed {
                            step: launch.step,
                            reason: reason.clone(),
                        });
                        let failed = Effect::Failed {
                            step: launch.step,
                            reason,
                            last_exit,
                            failure,
                        };
                        let effects = [shown, failed].into_iter().chain(start);
                        (Phase::Idle, effects.collect())
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
                vec![
                    Record(RecordEvent::WorkerEnded),
                    Effect::Judge {
                        worker,
                        outcome,
                        files,
                    },
                ],
            ),
            Phase::Stopping { worker, stop } if worker.generation == generation => (
                Phase::Idle,
                vec![
                    Record(RecordEvent::WorkerEnded),
                    Record(RecordEvent::StopDone {
                        step: Some(worker.step),
                    }),
                    Effect::Stopped {
                        worker,
                        stop,
                        outcome,
                    },
                ],
            ),
            Phase::KillingHung { worker, report, .. } if worker.generation == generation => (
                Phase::Idle,
                vec![
                    Record(RecordEvent::WorkerEnded),
                    Effect::HungEnded {
                        worker,
                        report,
                        outcome,
                    },
                ],
            ),
            // A worker no longer supervised.
            other => (other, Vec::new()),
        },

        Event::ExitJudged {
            worker,
            outcome,
            verdict,
            last_step,
        } => match phase {
            // Judged right after its exit, from `Idle`.
            Phase::Idle => {
                let step = worker.step;
                let effects = match verdict {
                    Verdict::Success => {
                        let done = RecordEvent::StepDone { step };
                        let mut after = record.clone();
                        after.apply(done.clone());
                        [Record(done), Effect::StepDone { step }]
                            .into_iter()
                            .chain(advance(&after, None))
                            .collect()
                    }
                    Verdict::StoppedExternally => vec![
                        Record(RecordEvent::Stopped {
                            step: Some(step),
                            cause: StopCause::External,
                        }),
                        Effect::StoppedOutside { step },
                    ],
                    Verdict::Failed { failure, .. } => vec![
                        Record(RecordEvent::WorkerFailed(failure.clone())),
                        Effect::WorkerFailed {
                            worker,
                            failure,
                            outcome,
                            last_step,
                        },
                    ],
                };
                (Phase::Idle, effects)
            }
            other => (other, Vec::new()),
        },

        Event::HungJudged {
            report,
            grace,
            said,
        } => match phase {
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
                    Record(RecordEvent::Hung { error: said }),
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
                    Record(RecordEvent::StopBegun { cause }),
                    Effect::StopBegun { timeout },
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
                let shown = Record(RecordEvent::Stopped {
                    step: Some(launch.step),
                    cause,
                });
                let stopped = Effect::StopDuringLaunch {
                    step: launch.step,
                    reply,
                };
                let start = start.map(Effect::AnswerStart);
                let effects = [shown, stopped].into_iter().chain(start);
                (Phase::Idle, effects.collect())
            }
            // Crashed and waiting to restart, or waiting for disk space: cancelling
            // the restart is the stop (the step runs again at the next start).
            Phase::Idle | Phase::BackingOff { .. } | Phase::WaitingForDisk { .. } => {
                let cancelled = record.restart_pending();
                let shown = cancelled.then(|| {
                    Record(RecordEvent::Stopped {
                        step: record.active_step,
                        cause,
                    })
                });
                let stopped = Effect::StopWithoutWorker { cancelled, reply };
                (Phase::Idle, shown.into_iter().chain([stopped]).collect())
            }
        },

        Event::RestartDecided {
            delay,
            restart,
            crash,
        } => match phase {
            Phase::Idle => (
                Phase::BackingOff {
                    at: now + delay,
                    restart,
                },
                crash
                    .map(|crash| match crash {
                        Crash {
                            error,
                            rolled_back: Some(range),
                            ..
                        } => Record(RecordEvent::RolledBack { range, error }),
                        Crash {
                            error, restarts, ..
                        } => Record(RecordEvent::Crashed { error, restarts }),
                    })
                    .into_iter()
                    .collect(),
            ),
            // Decided only once a worker ended, from `Idle`.
            other => (other, Vec::new()),
        },

        Event::Adopted { worker, stop } => match (phase, stop) {
            (Phase::Idle, None) => (
                Phase::Running { worker },
                vec![Record(RecordEvent::Adopted)],
            ),
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

        Event::DiskFullJudged {
            mut wait,
            error,
            shown,
        } => match phase {
            // Judged only once a worker ended, from `Idle`; checked at once.
            Phase::Idle => {
                wait.check_at = None;
                (
                    Phase::WaitingForDisk { wait },
                    vec![
                        Record(RecordEvent::DiskFull { error, wait: shown }),
                        Effect::CheckDisk { first: true },
                    ],
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
                    return (Phase::Idle, vec![Record(RecordEvent::DiskBack), back]);
                }
                let first = !wait.told;
                let wait = DiskWaiting {
                    check_at: Some(now + wait.every),
                    told: true,
                    ..wait
                };
                // Shown since the wait began (`DiskFull`), rewritten only when it
                // changes.
                let seen = record
                    .disk_wait()
                    .map(|w| (w, check.shown(w.since.clone())))
                    .filter(|(w, shown)| *w != shown)
                    .map(|(_, shown)| Record(RecordEvent::DiskWaitSeen(shown)));
                let still = Effect::DiskStillFull { check, first };
                (
                    Phase::WaitingForDisk { wait },
                    seen.into_iter().chain([still]).collect(),
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

        Event::SlurmJobMoved(job) => match phase {
            mut phase @ (Phase::Running { .. }
            | Phase::Stopping { .. }
            | Phase::KillingHung { .. }) => {
                if let Some(worker) = phase.worker_mut() {
                    worker.handle = WorkerHandle::Slurm { slurm: job.clone() };
                }
                (phase, vec![Record(RecordEvent::SlurmJobSeen(job))])
            }
            // No worker left to show it.
            other => (other, Vec::new()),
        },

        Event::FoundAtStart(found) => {
            let change = match found {
                Found::WorkerGone => RecordEvent::WorkerEnded,
                Found::StopOver => RecordEvent::StopDone { step: None },
            };
            (phase, vec![Record(change)])
        }

        Event::ResumeAsked {
            cause,
            resume_on_start,
        } => match (phase, record.next_step()) {
            (Phase::Idle, Some(step)) if resume_on_start => {
                (Phase::Idle, vec![Effect::Resume { step, cause }])
            }
            (Phase::Idle, Some(step)) => (
                Phase::Idle,
                vec![
                    Record(RecordEvent::Stopped {
                        step: Some(step),
                        cause,
                    }),
                    Effect::StaysStopped { step, cause },
                ],
            ),
            // Every step done, or a worker already under way.
            (other, _) => (other, Vec::new()),
        },

        Event::IntervalLearned { run_dir, longest_s } => {
            let longer = record.run_dir.as_ref() == Some(&run_dir)
                && record
                    .heartbeat_interval_s
                    .is_none_or(|known| longest_s > known);
            let learned = longer.then_some(Record(RecordEvent::HeartbeatInterval(longest_s)));
            (phase, learned.into_iter().collect())
        }
    }
}

/// What follows once `record` has a step done or is new: its next step's launch, or
/// the finish when every step is done; `start`: the start whose reply waits.
fn advance(record: &PipelineRecord, start: Option<PendingStart>) -> Vec<Effect> {
    match record.next_step() {
        Some(step) => vec![Effect::SpawnStep { step, start }],
        None => vec![
            Effect::Record(RecordEvent::Finished),
            Effect::Finished { start },
        ],
    }
}
