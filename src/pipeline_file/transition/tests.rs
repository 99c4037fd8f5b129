//! The record as a table: one row per (state before, event) → state after, each a
//! transition a person sees in `/status` (`pipeline.state`, its worker, its stop
//! cause, its disk wait). docs/ARCHITECTURE.md lists the same rows.

use super::*;
use crate::status::PipelineState;

fn worker() -> WorkerRecord {
    WorkerRecord::sample()
}

fn wait(need_bytes: u64) -> DiskWait {
    DiskWait {
        path: PathBuf::from("/data"),
        need_bytes,
        free_bytes: Some(1),
        since: "2026-01-01T00:00:00Z".into(),
        message: "a save found the disk full".into(),
    }
}

fn failure() -> Failure {
    Failure::new(crate::failure::FailureKind::Crash, "exit code 3")
}

/// A pipeline of one train step, in `state`.
fn record(state: RecordState) -> PipelineRecord {
    PipelineRecord {
        state,
        steps: vec![super::super::StepEntry {
            name: PipelineStep::Train,
            state: StepState::Pending,
        }],
        chunk: Some(1),
        run_dir: Some(PathBuf::from("/data/checkpoints/run-1")),
        ..PipelineRecord::idle()
    }
}

fn running() -> RecordState {
    RecordState::Running {
        worker: Some(worker()),
    }
}

fn launching() -> RecordState {
    RecordState::Running { worker: None }
}

fn stopping(cause: Option<StopCause>, worker: Option<WorkerRecord>) -> RecordState {
    RecordState::Stopping { cause, worker }
}

fn stopped(cause: StopCause) -> RecordState {
    RecordState::Stopped { cause: Some(cause) }
}

fn waiting(w: Option<DiskWait>) -> RecordState {
    RecordState::WaitingForDisk { wait: w }
}

/// (state before, event, state after), one row a line.
fn rows() -> Vec<(RecordState, RecordEvent, RecordState)> {
    use RecordEvent as E;
    use RecordState as S;
    let started = Box::new(record(launching()));
    let crashed = |restarts| E::Crashed {
        error: "exit code 3".into(),
        restarts,
    };
    let train = Some(PipelineStep::Train);
    vec![
        (S::Idle, E::Started(started.clone()), launching()),
        (S::Finished, E::Started(started.clone()), launching()),
        (S::Failed, E::Started(started.clone()), launching()),
        (launching(), E::WorkerRunning(worker()), running()),
        (running(), E::WorkerEnded, launching()),
        (running(), E::Adopted, running()),
        // running → crashed → running: a crash restart as the status shows it.
        (launching(), crashed(Some(1)), S::Crashed),
        (S::Crashed, E::WorkerRunning(worker()), running()),
        (launching(), crashed(None), S::Crashed),
        (
            launching(),
            E::RolledBack {
                range: range(),
                error: "diverged".into(),
            },
            S::Crashed,
        ),
        (
            running(),
            E::Hung {
                error: "no heartbeat".into(),
            },
            running(),
        ),
        (
            launching(),
            E::Failed {
                step: PipelineStep::Train,
                reason: "3 restarts".into(),
            },
            S::Failed,
        ),
        (
            S::Crashed,
            E::Failed {
                step: PipelineStep::Train,
                reason: "launch".into(),
            },
            S::Failed,
        ),
        (launching(), E::Finished, S::Finished),
        (
            launching(),
            E::StepDone {
                step: PipelineStep::Train,
            },
            launching(),
        ),
        (
            running(),
            E::StopBegun {
                cause: StopCause::Operator,
            },
            stopping(Some(StopCause::Operator), Some(worker())),
        ),
        (
            stopping(Some(StopCause::Operator), Some(worker())),
            E::WorkerEnded,
            stopping(Some(StopCause::Operator), None),
        ),
        (
            stopping(Some(StopCause::Operator), None),
            E::StopDone { step: train },
            stopped(StopCause::Operator),
        ),
        (
            stopping(Some(StopCause::DaemonExit), None),
            E::StopDone { step: None },
            stopped(StopCause::DaemonExit),
        ),
        (
            stopping(None, None),
            E::StopDone { step: train },
            S::Stopped { cause: None },
        ),
        (
            launching(),
            E::Stopped {
                step: train,
                cause: StopCause::External,
            },
            stopped(StopCause::External),
        ),
        (
            S::Crashed,
            E::Stopped {
                step: train,
                cause: StopCause::Operator,
            },
            stopped(StopCause::Operator),
        ),
        (
            stopped(StopCause::DaemonExit),
            E::Stopped {
                step: train,
                cause: StopCause::DaemonExit,
            },
            stopped(StopCause::DaemonExit),
        ),
        (
            stopped(StopCause::DaemonExit),
            E::WorkerRunning(worker()),
            running(),
        ),
        (
            stopped(StopCause::PowerLoss),
            E::WorkerRunning(worker()),
            running(),
        ),
        (
            launching(),
            E::DiskFull {
                error: "ENOSPC".into(),
                wait: wait(0),
            },
            waiting(Some(wait(0))),
        ),
        (
            waiting(Some(wait(0))),
            E::DiskWaitSeen(wait(9)),
            waiting(Some(wait(9))),
        ),
        (waiting(Some(wait(9))), E::DiskBack, waiting(None)),
        (waiting(None), E::WorkerRunning(worker()), running()),
        (
            waiting(Some(wait(9))),
            E::Stopped {
                step: train,
                cause: StopCause::Operator,
            },
            stopped(StopCause::Operator),
        ),
        (running(), E::DiskWaitSeen(wait(9)), running()),
        (running(), E::WorkerFailed(failure()), running()),
    ]
}

fn range() -> SkipRange {
    SkipRange {
        from_step: 20,
        to_step: 31,
        checkpoint: "pretrain-0020".into(),
        reason: "loss 9.81 > 3 × median 2.10".into(),
        at: "2026-01-01T00:00:00Z".into(),
    }
}

#[test]
fn each_row_is_the_state_after_its_event() {
    let mut wrong = Vec::new();
    for (before, event, after) in rows() {
        let mut r = record(before.clone());
        r.apply(event.clone());
        if r.state != after {
            wrong.push(format!(
                "{before:?} + {event:?}: {:?}, the table says {after:?}",
                r.state
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `running → crashed → running`, as `/status` shows it: the state, the restart
/// count, the last error, the step, and whether the daemon brings it back.
#[test]
fn a_crash_restart_reads_crashed_then_running() {
    let mut r = record(launching());
    r.apply(RecordEvent::WorkerRunning(worker()));
    assert_eq!(r.state.kind(), PipelineState::Running);
    assert_eq!(r.step_state(PipelineStep::Train), Some(StepState::Running));
    assert_eq!(r.active_step, Some(PipelineStep::Train));
    assert!(r.is_active() && !r.restart_pending());

    r.apply(RecordEvent::WorkerEnded);
    r.apply(RecordEvent::WorkerFailed(failure()));
    r.apply(RecordEvent::Crashed {
        error: "exit code 3".into(),
        restarts: Some(1),
    });
    assert_eq!(r.state.kind(), PipelineState::Crashed);
    assert_eq!(
        (r.restarts, r.last_error.as_deref()),
        (1, Some("exit code 3"))
    );
    assert!(r.worker().is_none() && r.restart_pending() && r.is_active());
    assert_eq!(r.active_step, Some(PipelineStep::Train));

    r.apply(RecordEvent::WorkerRunning(worker()));
    assert_eq!(r.state.kind(), PipelineState::Running);
    assert!(r.worker().is_some() && !r.restart_pending());
    // The crash stays told: the count, the error and the failure.
    assert_eq!(r.restarts, 1);
    assert_eq!(r.failure, Some(failure()));
}

/// The fields a transition sets beside the state.
#[test]
fn transitions_set_their_fields() {
    let mut r = record(launching());
    r.apply(RecordEvent::Failed {
        step: PipelineStep::Train,
        reason: "gave up".into(),
    });
    assert_eq!(r.step_state(PipelineStep::Train), Some(StepState::Failed));
    assert_eq!(r.last_error.as_deref(), Some("gave up"));

    let mut r = record(running());
    r.apply(RecordEvent::StopBegun {
        cause: StopCause::Operator,
    });
    assert_eq!(r.stop_cause(), Some(StopCause::Operator));
    r.apply(RecordEvent::WorkerEnded);
    r.apply(RecordEvent::StopDone {
        step: Some(PipelineStep::Train),
    });
    assert_eq!(r.step_state(PipelineStep::Train), Some(StepState::Pending));
    assert_eq!(r.stop_cause(), Some(StopCause::Operator));
    assert!(!r.is_active());
    r.apply(RecordEvent::WorkerRunning(worker()));
    assert_eq!(r.stop_cause(), None, "a launch ends the stop");

    let mut r = record(launching());
    r.apply(RecordEvent::StepDone {
        step: PipelineStep::Train,
    });
    assert_eq!(r.step_state(PipelineStep::Train), Some(StepState::Done));
    assert_eq!(r.active_step, None);

    let mut r = record(launching());
    r.apply(RecordEvent::RolledBack {
        range: range(),
        error: "diverged".into(),
    });
    assert_eq!(r.rollbacks, vec![range()]);
    assert!(r.restart_pending());

    let mut r = record(launching());
    r.restarts = 3;
    r.apply(RecordEvent::Counted {
        reset: true,
        no_progress_restarts: 2,
        same_failure: None,
    });
    assert_eq!((r.restarts, r.no_progress_restarts), (0, 2));
    r.apply(RecordEvent::DiskFull {
        error: "ENOSPC".into(),
        wait: wait(5),
    });
    assert_eq!(r.disk_wait(), Some(&wait(5)));
    assert!(r.restart_pending() && r.is_active());
}

/// The table in docs/ARCHITECTURE.md is this one: each row's states and event.
#[test]
fn the_architecture_doc_lists_the_rows() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"),
    )
    .unwrap();
    let mut missing = Vec::new();
    for line in table_lines() {
        if !doc.contains(&line) {
            missing.push(line);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md lacks these record transitions:\n{}",
        missing.join("\n")
    );
}

/// `| running | crash restart due | crashed |`: a row as the doc shows it.
fn table_lines() -> Vec<String> {
    let mut lines: Vec<String> = rows()
        .iter()
        .map(|(before, event, after)| {
            format!(
                "| {} | {} | {} |",
                shown(before),
                event_name(event),
                shown(after)
            )
        })
        .collect();
    lines.dedup();
    lines
}

/// The state with what it holds that the status shows.
fn shown(state: &RecordState) -> String {
    let name = state.kind().as_str();
    match state {
        RecordState::Running { worker: None } => format!("{name} (launching)"),
        RecordState::Stopping { cause, worker } => format!(
            "{name} ({}, {})",
            cause.map_or("no cause".to_string(), cause_name),
            if worker.is_some() {
                "worker"
            } else {
                "no worker"
            }
        ),
        RecordState::Stopped { cause } => {
            format!(
                "{name} ({})",
                cause.map_or("no cause".to_string(), cause_name)
            )
        }
        RecordState::WaitingForDisk { wait } => format!(
            "{name} ({})",
            wait.as_ref().map_or("space back".to_string(), |w| format!(
                "needs {}",
                w.need_bytes
            ))
        ),
        _ => name.to_string(),
    }
}

fn cause_name(cause: StopCause) -> String {
    serde_json::to_value(cause)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

fn event_name(event: &RecordEvent) -> String {
    let debug = format!("{event:?}");
    let name: String = debug.chars().take_while(|c| c.is_alphanumeric()).collect();
    match event {
        RecordEvent::Crashed {
            restarts: Some(n), ..
        } => format!("{name} (restart {n})"),
        RecordEvent::Crashed { restarts: None, .. } => format!("{name} (not counted)"),
        RecordEvent::StopBegun { cause } | RecordEvent::Stopped { cause, .. } => {
            format!("{name} ({})", cause_name(*cause))
        }
        RecordEvent::DiskWaitSeen(w) => format!("{name} (needs {})", w.need_bytes),
        _ => name,
    }
}

/// Prints the table for the doc: `cargo test -p lavender --lib record_table -- --nocapture`.
#[test]
fn record_table() {
    for line in table_lines() {
        println!("{line}");
    }
}
