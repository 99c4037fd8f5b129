//! The machine as a table: one row per (phase, event) → (phase, effects), and the
//! diagram in docs/ARCHITECTURE.md drawn from the same rows.

use std::path::PathBuf;
use std::time::Duration;

use lavender::config::{PipelineStep, Scale};
use lavender::heartbeat::WorkerState;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::effect::EFFECTS;
use super::event::EVENTS;
use super::phase::PHASES;
use super::*;
use crate::exit::ExitOutcome;
use crate::pipeline::handle::HungReport;
use crate::pipeline::stop::StopMark;
use crate::process::slurm::SlurmJob;
use crate::process::{ProcessIdentity, SpawnSpec, WorkerHandle};
use lavender::pipeline_file::StopCause;
use lavender::steps::inputs::LocalFiles;

const TIMEOUT: Duration = Duration::from_secs(30);
const GRACE: Duration = Duration::from_secs(10);

fn handle(pid: u32) -> WorkerHandle {
    WorkerHandle::Local(ProcessIdentity {
        pid,
        start_time: "1".into(),
        generation: None,
    })
}

fn queued_job() -> WorkerHandle {
    WorkerHandle::Slurm {
        slurm: SlurmJob {
            job_id: "7".into(),
            node: None,
            state: Some("PENDING".into()),
            reason: None,
            seen: Box::default(),
        },
    }
}

fn live(generation: u64, handle: WorkerHandle, t0: Instant) -> LiveWorker {
    LiveWorker {
        generation,
        handle,
        step: PipelineStep::Train,
        started: t0,
        started_at: lavender::time::now_utc(),
        own_child: true,
        resumed_from_step: None,
    }
}

fn launch(generation: u64) -> Launching {
    Launching {
        generation,
        step: PipelineStep::Train,
        resume: None,
        resumed_from_step: None,
        relaunch: None,
        started_at: lavender::time::now_utc(),
    }
}

fn spec() -> SpawnSpec {
    SpawnSpec {
        command: vec!["worker".into()],
        step: PipelineStep::Train,
        config: PathBuf::from("c.yaml"),
        data_root: PathBuf::from("data"),
        run_dir: None,
        chunk: 0,
        resume: None,
        env: Default::default(),
        log_file: PathBuf::from("w.log"),
        log_rotation: Default::default(),
        progress_every: 1,
    }
}

fn start() -> PendingStart {
    PendingStart {
        reply: oneshot::channel().0,
        chunk: 0,
        scale: Scale::Tiny,
        notices: Vec::new(),
        config_line: String::new(),
    }
}

fn mark() -> StopMark {
    StopMark {
        run_dir: None,
        events_offset: 0,
        newest_before: None,
    }
}

fn stop(kill_at: Option<Instant>) -> Stop {
    Stop {
        escalation: kill_at.map_or(Escalation::Killed, |kill_at| Escalation::Term { kill_at }),
        waiters: Vec::new(),
        mark: mark(),
        resume_after: false,
    }
}

fn report(worker: WorkerHandle) -> HungReport {
    HungReport {
        worker,
        phase: WorkerState::Training,
        step: Some(40),
        stalled_for: Duration::from_secs(300),
        allowance: Duration::from_secs(120),
        allowance_key: "supervisor.stale_after_s",
        work: PipelineStep::Train,
    }
}

// The phases of the rows, worker generation 1 unless named.
fn idle() -> Phase {
    Phase::Idle
}
fn launching(start_waits: bool) -> Phase {
    Phase::Launching {
        launch: launch(1),
        start: start_waits.then(start),
    }
}
fn running(t0: Instant) -> Phase {
    Phase::Running {
        worker: live(1, handle(10), t0),
    }
}
fn running_queued(t0: Instant) -> Phase {
    Phase::Running {
        worker: live(1, queued_job(), t0),
    }
}
fn stopping(t0: Instant, kill_at: Option<Instant>) -> Phase {
    Phase::Stopping {
        worker: live(1, handle(10), t0),
        stop: stop(kill_at),
    }
}
fn killing_hung(t0: Instant) -> Phase {
    Phase::KillingHung {
        worker: live(1, handle(10), t0),
        escalation: Escalation::Term {
            kill_at: t0 + GRACE,
        },
        report: report(handle(10)),
    }
}
fn backing_off(t0: Instant) -> Phase {
    Phase::BackingOff {
        at: t0 + Duration::from_secs(5),
        restart: Restart {
            why: None,
            last_exit: Some(ExitOutcome::Code(1)),
        },
    }
}

fn disk_wait(t0: Instant, check_at: Option<Duration>, told: bool) -> DiskWaiting {
    DiskWaiting {
        restart: Restart {
            why: None,
            last_exit: Some(ExitOutcome::Code(83)),
        },
        check_at: check_at.map(|d| t0 + d),
        every: Duration::from_secs(2),
        told,
    }
}
/// Waiting for disk space, the next check due 2 s after the rows' start.
fn waiting(t0: Instant) -> Phase {
    Phase::WaitingForDisk {
        wait: disk_wait(t0, Some(Duration::from_secs(2)), true),
    }
}
/// Waiting for disk space, a check out (`told`: the wait was told).
fn checking(t0: Instant, told: bool) -> Phase {
    Phase::WaitingForDisk {
        wait: disk_wait(t0, None, told),
    }
}

// The events.
fn disk_full(t0: Instant) -> Event {
    Event::DiskFullJudged {
        wait: disk_wait(t0, None, false),
    }
}
fn disk_checked(free: u64) -> Event {
    checked(free, true)
}
/// A check the watchdog asked for while the worker ran.
fn running_checked(free: u64) -> Event {
    checked(free, false)
}
fn checked(free: u64, for_wait: bool) -> Event {
    Event::DiskChecked(crate::pipeline::save_room::DiskCheck {
        path: PathBuf::from("data"),
        next_save_bytes: Some(100),
        need_bytes: 110,
        free_bytes: Some(free),
        free_before: Some(free),
        dropped: Vec::new(),
        retention_error: None,
        for_wait,
    })
}
fn launch_asked(generation: u64, start_waits: bool) -> Event {
    Event::LaunchAsked {
        launch: launch(generation),
        spec: Box::new(spec()),
        start: start_waits.then(start),
    }
}
fn launched(generation: u64) -> Event {
    Event::LaunchFinished {
        generation,
        result: Ok(handle(20)),
    }
}
fn launch_failed(generation: u64) -> Event {
    Event::LaunchFinished {
        generation,
        result: Err("sbatch: error".into()),
    }
}
fn exited(generation: u64) -> Event {
    Event::WorkerExited {
        generation,
        outcome: ExitOutcome::Code(1),
        files: LocalFiles::default(),
    }
}
fn hung(worker: WorkerHandle) -> Event {
    Event::HungJudged {
        report: report(worker),
        grace: GRACE,
    }
}
fn stop_asked() -> Event {
    Event::StopAsked {
        timeout: TIMEOUT,
        cause: StopCause::Operator,
        reply: oneshot::channel().0,
        mark: mark(),
    }
}
fn restart_decided() -> Event {
    Event::RestartDecided {
        delay: Duration::from_secs(5),
        restart: Restart {
            why: None,
            last_exit: Some(ExitOutcome::Code(1)),
        },
    }
}
fn adopted(t0: Instant, stopping: bool) -> Event {
    Event::Adopted {
        worker: live(1, handle(10), t0),
        stop: stopping.then(|| stop(Some(t0 + TIMEOUT))),
    }
}

/// One transition: `from` hears `event` `after` the rows' start; the phase it
/// ends in and the effects asked, by name.
struct Row {
    from: Phase,
    event: Event,
    after: Duration,
    to: &'static str,
    effects: &'static [&'static str],
}

fn row(from: Phase, event: Event, to: &'static str, effects: &'static [&'static str]) -> Row {
    Row {
        from,
        event,
        after: Duration::ZERO,
        to,
        effects,
    }
}

fn later(after: Duration, mut row: Row) -> Row {
    row.after = after;
    row
}

/// Every transition of the machine, one row a line.
#[rustfmt::skip]
fn table(t0: Instant) -> Vec<Row> {
    let s = Duration::from_secs;
    vec![
        // Launches.
        row(idle(), launch_asked(1, false), "Launching", &["Launch"]),
        row(idle(), launch_asked(1, true), "Launching", &["Launch"]),
        row(launching(false), launched(1), "Running", &["Supervise"]),
        row(launching(true), launched(1), "Running", &["Supervise", "AnswerStart"]),
        row(launching(false), launch_failed(1), "Idle", &["LaunchFailed"]),
        row(launching(true), launch_failed(1), "Idle", &["LaunchFailed", "AnswerStart"]),
        // A launch a stop abandoned: its worker cancelled.
        row(idle(), launched(0), "Idle", &["Cancel"]),
        row(launching(false), launched(0), "Launching", &["Cancel"]),
        row(idle(), launch_failed(0), "Idle", &[]),
        // Exits.
        row(running(t0), exited(1), "Idle", &["Judge"]),
        row(running(t0), exited(0), "Running", &[]),
        row(stopping(t0, Some(t0 + TIMEOUT)), exited(1), "Idle", &["Stopped"]),
        row(killing_hung(t0), exited(1), "Idle", &["HungEnded"]),
        row(idle(), exited(1), "Idle", &[]),
        // Hangs.
        row(running(t0), hung(handle(10)), "KillingHung", &["Terminate", "HungKillBegun"]),
        row(running_queued(t0), hung(queued_job()), "Running", &["QueuedNotHung"]),
        row(running(t0), hung(handle(99)), "Running", &[]),
        row(stopping(t0, Some(t0 + TIMEOUT)), hung(handle(10)), "Stopping", &[]),
        row(killing_hung(t0), hung(handle(10)), "KillingHung", &[]),
        // Stops.
        row(running(t0), stop_asked(), "Stopping", &["Terminate", "StopBegun"]),
        row(killing_hung(t0), stop_asked(), "Stopping", &["Terminate", "StopBegun"]),
        row(stopping(t0, Some(t0 + TIMEOUT)), stop_asked(), "Stopping", &[]),
        row(launching(false), stop_asked(), "Idle", &["StopDuringLaunch"]),
        row(launching(true), stop_asked(), "Idle", &["StopDuringLaunch", "AnswerStart"]),
        row(idle(), stop_asked(), "Idle", &["StopWithoutWorker"]),
        row(backing_off(t0), stop_asked(), "Idle", &["StopWithoutWorker"]),
        // Restarts.
        row(idle(), restart_decided(), "BackingOff", &[]),
        later(s(4), row(backing_off(t0), Event::TimerFired, "BackingOff", &[])),
        later(s(5), row(backing_off(t0), Event::TimerFired, "Idle", &["RestartDue"])),
        // Escalations.
        later(s(29), row(stopping(t0, Some(t0 + TIMEOUT)), Event::TimerFired, "Stopping", &[])),
        later(s(30), row(stopping(t0, Some(t0 + TIMEOUT)), Event::TimerFired, "Stopping", &["Kill"])),
        later(s(60), row(stopping(t0, None), Event::TimerFired, "Stopping", &[])),
        later(s(9), row(killing_hung(t0), Event::TimerFired, "KillingHung", &[])),
        later(s(10), row(killing_hung(t0), Event::TimerFired, "KillingHung", &["Kill"])),
        row(running(t0), Event::TimerFired, "Running", &[]),
        // A full disk: waited out, checked every few seconds off the actor.
        row(idle(), disk_full(t0), "WaitingForDisk", &["CheckDisk"]),
        row(checking(t0, false), disk_checked(50), "WaitingForDisk", &["DiskStillFull"]),
        row(checking(t0, true), disk_checked(50), "WaitingForDisk", &["DiskStillFull"]),
        row(checking(t0, true), disk_checked(500), "Idle", &["DiskBack"]),
        // A check asked while the worker ran, back after it ended: not the wait's.
        row(checking(t0, false), running_checked(500), "WaitingForDisk", &[]),
        later(s(1), row(waiting(t0), Event::TimerFired, "WaitingForDisk", &[])),
        later(s(2), row(waiting(t0), Event::TimerFired, "WaitingForDisk", &["CheckDisk"])),
        row(waiting(t0), disk_checked(500), "WaitingForDisk", &[]),
        row(waiting(t0), stop_asked(), "Idle", &["StopWithoutWorker"]),
        row(waiting(t0), launch_asked(2, true), "WaitingForDisk", &["AnswerStart"]),
        row(running(t0), disk_full(t0), "Running", &[]),
        row(idle(), disk_checked(500), "Idle", &[]),
        // The next save looked short while a worker runs: early retention.
        row(running(t0), running_checked(50), "Running", &["DiskCheckedRunning"]),
        // At daemon start.
        row(idle(), adopted(t0, false), "Running", &[]),
        row(idle(), adopted(t0, true), "Stopping", &[]),
    ]
}

#[test]
fn transition_table() {
    let t0 = Instant::now();
    for Row {
        from,
        event,
        after,
        to,
        effects,
    } in table(t0)
    {
        let what = format!("{} + {} (at +{after:?})", from.name(), event.name());
        let (next, done) = step(from, event, t0 + after);
        let done: Vec<&str> = done.iter().map(Effect::name).collect();
        assert_eq!((next.name(), done.as_slice()), (to, effects), "{what}");
    }
}

#[test]
fn the_timers_are_set_from_the_clock_passed_in() {
    let t0 = Instant::now();
    let (next, _) = step(running(t0), stop_asked(), t0);
    assert_eq!(
        next.deadline(),
        Some(t0 + TIMEOUT),
        "SIGKILL at the stop timeout"
    );
    let (next, _) = step(running(t0), hung(handle(10)), t0);
    assert_eq!(next.deadline(), Some(t0 + GRACE), "SIGKILL after the grace");
    let (next, _) = step(idle(), restart_decided(), t0);
    assert_eq!(
        next.deadline(),
        Some(t0 + Duration::from_secs(5)),
        "the backoff"
    );
    let (next, _) = step(next, Event::TimerFired, t0 + Duration::from_secs(5));
    assert_eq!(next.deadline(), None, "no timer once the restart is due");
    let (next, _) = step(stopping(t0, Some(t0)), Event::TimerFired, t0);
    assert_eq!(next.deadline(), None, "SIGKILL sent once");
    let (next, _) = step(idle(), disk_full(t0), t0);
    assert_eq!(next.deadline(), None, "no timer while a check is out");
    let (next, effects) = step(next, disk_checked(50), t0);
    assert_eq!(
        next.deadline(),
        Some(t0 + Duration::from_secs(2)),
        "the next check"
    );
    let [Effect::DiskStillFull { first: true, .. }] = effects.as_slice() else {
        panic!("the wait begins, told once");
    };
    let (next, _) = step(next, Event::TimerFired, t0 + Duration::from_secs(2));
    let (_, effects) = step(next, disk_checked(50), t0);
    let [Effect::DiskStillFull { first: false, .. }] = effects.as_slice() else {
        panic!("told once only");
    };
}

#[test]
fn a_stop_while_stopping_waits_with_the_first() {
    let t0 = Instant::now();
    let (next, _) = step(running(t0), stop_asked(), t0);
    let (next, effects) = step(next, stop_asked(), t0);
    assert!(effects.is_empty(), "one SIGTERM");
    let Phase::Stopping { stop, .. } = next else {
        panic!("stopping");
    };
    assert_eq!(stop.waiters.len(), 2);
}

#[test]
fn a_launch_asked_while_busy_answers_the_start_and_launches_nothing() {
    let t0 = Instant::now();
    let (next, effects) = step(running(t0), launch_asked(2, true), t0);
    let effects: Vec<&str> = effects.iter().map(Effect::name).collect();
    assert_eq!(
        (next.name(), effects.as_slice()),
        ("Running", &["AnswerStart"][..])
    );
}

#[test]
fn a_failed_restart_launch_keeps_the_crash_it_follows() {
    let t0 = Instant::now();
    let mut restart = launch(1);
    let failure = lavender::failure::Failure::new(lavender::failure::FailureKind::Crash, "oom");
    restart.relaunch = Some(Relaunch::Restart(Restart {
        why: Some(PendingRestart::Failed(failure.clone())),
        last_exit: Some(ExitOutcome::Code(137)),
    }));
    let from = Phase::Launching {
        launch: restart,
        start: None,
    };
    let (_, effects) = step(from, launch_failed(1), t0);
    let [
        Effect::LaunchFailed {
            last_exit,
            failure: said,
            ..
        },
    ] = effects.as_slice()
    else {
        panic!("the launch failed");
    };
    assert_eq!(*last_exit, Some(ExitOutcome::Code(137)));
    assert_eq!(said.as_ref(), Some(&failure));
}

/// The mermaid diagram of the table's transitions, one arrow per (phase, event,
/// phase) with the effects its rows ask (a row that changes nothing is left out),
/// as docs/ARCHITECTURE.md shows it.
fn diagram(rows: &[Row]) -> String {
    let mut arrows: Vec<(&str, &str, &str, Vec<&str>)> = Vec::new();
    for r in rows {
        let (from, event) = (r.from.name(), r.event.name());
        if from == r.to && r.effects.is_empty() {
            continue;
        }
        let at = arrows
            .iter()
            .position(|a| (a.0, a.1, a.2) == (from, event, r.to))
            .unwrap_or_else(|| {
                arrows.push((from, event, r.to, Vec::new()));
                arrows.len() - 1
            });
        for effect in r.effects {
            if !arrows[at].3.contains(effect) {
                arrows[at].3.push(effect);
            }
        }
    }
    let mut text = "stateDiagram-v2\n    [*] --> Idle\n".to_string();
    for (from, event, to, effects) in arrows {
        text.push_str(&format!("    {from} --> {to}: {event}"));
        if !effects.is_empty() {
            text.push_str(&format!(" / {}", effects.join(", ")));
        }
        text.push('\n');
    }
    text
}

#[test]
fn the_architecture_doc_draws_this_machine() {
    let rows = table(Instant::now());
    for phase in PHASES {
        assert!(
            rows.iter().any(|r| r.from.name() == phase),
            "the table has no row from {phase}"
        );
    }
    for event in EVENTS {
        assert!(
            rows.iter().any(|r| r.event.name() == event),
            "the table has no row for {event}"
        );
    }
    for effect in EFFECTS {
        assert!(
            rows.iter().any(|r| r.effects.contains(&effect)),
            "the table has no row asking {effect}"
        );
    }
    let drawn = format!("```mermaid\n{}```", diagram(&rows));
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/ARCHITECTURE.md"
    ))
    .expect("docs/ARCHITECTURE.md");
    assert!(
        doc.contains(&drawn),
        "docs/ARCHITECTURE.md does not draw the pipeline's machine as it is; its section \
         \"The pipeline's state machine\" should hold:\n{drawn}"
    );
}
