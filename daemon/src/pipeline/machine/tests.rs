//! The machine as a table: one row per (phase, event) → (phase, effects, what the
//! status shows), and the diagram in docs/ARCHITECTURE.md drawn from the same rows.

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
use crate::pipeline::judge::Verdict;
use crate::pipeline::stop::StopMark;
use crate::process::slurm::SlurmJob;
use crate::process::{ProcessIdentity, SpawnSpec, WorkerHandle};
use lavender::compose::{FileFacts, Liveness, StatusSettings, compose};
use lavender::pipeline_file::{PipelineRecord, RecordState, StepEntry, StopCause, WorkerRecord};
use lavender::status::{DiskWait, StepState};
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
        error: "No space left on device".into(),
        shown: shown_wait("a save found the disk full; checking"),
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
fn resume_asked(resume_on_start: bool) -> Event {
    Event::ResumeAsked {
        cause: StopCause::DaemonExit,
        resume_on_start,
    }
}
fn start_prepared(record: PipelineRecord) -> Event {
    Event::StartPrepared {
        record: Box::new(record),
        start: start(),
    }
}
fn gave_up() -> Event {
    Event::GaveUp {
        step: PipelineStep::Train,
        reason: "exit code 1 three times at step 40".into(),
        last_exit: Some(ExitOutcome::Code(1)),
        failure: None,
    }
}
fn judged(t0: Instant, verdict: Verdict) -> Event {
    Event::ExitJudged {
        worker: live(1, handle(10), t0),
        outcome: ExitOutcome::Code(1),
        verdict,
        last_step: Some(40),
    }
}
fn failed() -> Verdict {
    Verdict::Failed {
        failure: lavender::failure::Failure::new(
            lavender::failure::FailureKind::Crash,
            "exit code 1",
        ),
        said: false,
    }
}
fn hung(worker: WorkerHandle) -> Event {
    Event::HungJudged {
        report: report(worker),
        grace: GRACE,
        said: "hung at step 40 for 5m 0s".into(),
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
    restart_after(Some(Crash {
        error: "exit code 1".into(),
        restarts: Some(2),
        rolled_back: None,
    }))
}
/// A restart a daemon before this one decided: the record shows it already.
fn restart_resumed() -> Event {
    restart_after(None)
}
fn rolled_back() -> Event {
    restart_after(Some(Crash {
        error: "loss diverged at step 40; rolled back".into(),
        restarts: None,
        rolled_back: Some(lavender::skips::SkipRange {
            from_step: 30,
            to_step: 40,
            checkpoint: "step-30".into(),
            reason: "loss diverged at step 40".into(),
            at: SINCE.into(),
        }),
    }))
}
fn restart_after(crash: Option<Crash>) -> Event {
    Event::RestartDecided {
        delay: Duration::from_secs(5),
        restart: Restart {
            why: None,
            last_exit: Some(ExitOutcome::Code(1)),
        },
        crash,
    }
}
fn job_moved(state: &str) -> Event {
    let WorkerHandle::Slurm { mut slurm } = queued_job() else {
        unreachable!("a Slurm job");
    };
    slurm.state = Some(state.into());
    Event::SlurmJobMoved(slurm)
}
fn interval(run_dir: &str, longest_s: f64) -> Event {
    Event::IntervalLearned {
        run_dir: PathBuf::from(run_dir),
        longest_s,
    }
}
fn adopted(t0: Instant, stopping: bool) -> Event {
    Event::Adopted {
        worker: live(1, handle(10), t0),
        stop: stopping.then(|| stop(Some(t0 + TIMEOUT))),
    }
}

const SINCE: &str = "2026-01-01T00:00:00Z";

fn shown_wait(message: &str) -> DiskWait {
    DiskWait {
        path: PathBuf::from("data"),
        need_bytes: 110,
        free_bytes: None,
        since: SINCE.into(),
        message: message.into(),
    }
}

fn worker_record(pid: u32) -> WorkerRecord {
    WorkerRecord {
        handle: handle(pid),
        step: PipelineStep::Train,
        started_at: lavender::time::now_utc(),
        resumed_from_step: None,
    }
}

/// The record as the daemon keeps it in `phase` (a pipeline of one train step
/// that is under way): what the status shows before the row's event.
fn record_of(phase: &Phase) -> PipelineRecord {
    let (state, last_error, restarts) = match phase {
        Phase::Idle | Phase::Launching { .. } => (RecordState::Running { worker: None }, None, 0),
        Phase::Running { worker } => {
            let mut w = worker_record(10);
            w.handle = worker.handle.clone();
            (RecordState::Running { worker: Some(w) }, None, 0)
        }
        Phase::Stopping { .. } => (
            RecordState::Stopping {
                cause: Some(StopCause::Operator),
                worker: Some(worker_record(10)),
            },
            None,
            0,
        ),
        Phase::KillingHung { .. } => (
            RecordState::Running {
                worker: Some(worker_record(10)),
            },
            Some("hung at step 40 for 5m 0s"),
            0,
        ),
        Phase::BackingOff { .. } => (RecordState::Crashed, Some("exit code 1"), 1),
        Phase::WaitingForDisk { .. } => (
            RecordState::WaitingForDisk {
                wait: Some(shown_wait("a save found the disk full; checking")),
            },
            Some("No space left on device"),
            0,
        ),
    };
    PipelineRecord {
        state,
        steps: vec![StepEntry {
            name: PipelineStep::Train,
            state: StepState::Running,
        }],
        active_step: Some(PipelineStep::Train),
        chunk: Some(1),
        run_dir: Some(PathBuf::from("run-1")),
        last_error: last_error.map(String::from),
        restarts,
        ..PipelineRecord::idle()
    }
}

/// The record a start prepared, before its first launch: steps pending.
fn started() -> PipelineRecord {
    let mut record = record_of(&Phase::Idle);
    record.steps[0].state = StepState::Pending;
    record.active_step = None;
    record
}

/// Training done, hard examples to mine next.
fn two_steps() -> PipelineRecord {
    let mut record = record_of(&Phase::Idle);
    record.steps.push(StepEntry {
        name: PipelineStep::MineHard,
        state: StepState::Pending,
    });
    record
}

/// Stopped by the previous daemon's exit, or (`stop_over`) still stopping with no
/// worker left: what a daemon start finds after a service restart.
fn interrupted(stop_over: bool) -> PipelineRecord {
    let mut record = record_of(&Phase::Idle);
    record.state = if stop_over {
        RecordState::Stopping {
            cause: Some(StopCause::DaemonExit),
            worker: None,
        }
    } else {
        RecordState::Stopped {
            cause: Some(StopCause::DaemonExit),
        }
    };
    record.steps[0].state = StepState::Pending;
    record.active_step = None;
    record
}

/// Every step done.
fn finished() -> PipelineRecord {
    let mut record = record_of(&Phase::Idle);
    record.state = RecordState::Finished;
    record.steps[0].state = StepState::Done;
    record.active_step = None;
    record
}

/// The record the previous daemon left with its worker running, or being stopped.
fn left_running(stopping: bool) -> PipelineRecord {
    let mut record = record_of(&Phase::Idle);
    let worker = Some(worker_record(10));
    record.state = if stopping {
        RecordState::Stopping {
            cause: Some(StopCause::Operator),
            worker,
        }
    } else {
        RecordState::Running { worker }
    };
    record
}

/// What `lavenderd status` shows of `record` while the daemon runs, in a line:
/// `pipeline.state`, the worker's pid or Slurm job, the train step's state (`·`
/// when no step is active), `restarts` past 0, the worker's failure kind, and
/// `last_error` or the disk wait (free of needed bytes) when the state shows them.
fn seen(record: &PipelineRecord) -> String {
    let settings = StatusSettings::from_config(&lavender::config::Config::default());
    let status = compose(
        record,
        &FileFacts::empty(),
        &settings,
        lavender::time::now_utc(),
        Liveness::Supervised,
    );
    let p = &status.pipeline;
    let mut line = p.state.to_string();
    if let Some(pid) = p.pid {
        line.push_str(&format!(" pid {pid}"));
    }
    if let Some(job) = &p.slurm {
        let state = job.state.as_deref().unwrap_or("?");
        line.push_str(&format!(" job {} {state}", job.job_id));
    }
    let train = status
        .steps
        .get("train")
        .map_or("-".to_string(), ToString::to_string);
    let active = if status.active_step.is_some() {
        ""
    } else {
        " ·"
    };
    line.push_str(&format!(", train {train}{active}"));
    if p.restarts > 0 {
        line.push_str(&format!(", restarts {}", p.restarts));
    }
    if let Some(f) = &p.failure {
        line.push_str(&format!(", failure {}", f.kind));
    }
    if let Some(e) = &p.last_error {
        line.push_str(&format!(": {e}"));
    }
    if let Some(w) = &p.disk_wait {
        let free = w.free_bytes.map_or("?".to_string(), |f| f.to_string());
        line.push_str(&format!(" ({free} of {} B free)", w.need_bytes));
    }
    // Not in the status itself: the stall allowance it scales.
    if let Some(s) = record.heartbeat_interval_s {
        line.push_str(&format!("; heartbeat interval {s} s"));
    }
    line
}

/// One transition: `from`, its record as `record` has it, hears `event` `after`
/// the rows' start; the phase it ends in, the effects asked by name (the record's
/// changes left out), and what the status shows after the record's changes.
struct Row {
    from: Phase,
    record: PipelineRecord,
    event: Event,
    after: Duration,
    to: &'static str,
    effects: &'static [&'static str],
    shows: &'static str,
}

fn row(
    from: Phase,
    event: Event,
    to: &'static str,
    effects: &'static [&'static str],
    shows: &'static str,
) -> Row {
    Row {
        record: record_of(&from),
        from,
        event,
        after: Duration::ZERO,
        to,
        effects,
        shows,
    }
}

fn later(after: Duration, mut row: Row) -> Row {
    row.after = after;
    row
}

/// The row from `record` instead of the phase's usual one.
fn with(record: PipelineRecord, mut row: Row) -> Row {
    row.record = record;
    row
}

/// [`step`] from `phase`'s usual record.
fn stepped(phase: Phase, event: Event, now: Instant) -> (Phase, Vec<Effect>) {
    let record = record_of(&phase);
    step(phase, &record, event, now)
}

/// The step's effects by name, the record's changes left out, and the record
/// after them.
fn performed(
    effects: &[Effect],
    mut record: PipelineRecord,
) -> (Vec<&'static str>, PipelineRecord) {
    let mut named = Vec::new();
    for effect in effects {
        match effect {
            Effect::Record(change) => record.apply(change.clone()),
            other => named.push(other.name()),
        }
    }
    (named, record)
}

/// Every transition of the machine, one row a line.
#[rustfmt::skip]
fn table(t0: Instant) -> Vec<Row> {
    let s = Duration::from_secs;
    vec![
        // Starts, and the next step.
        with(finished(), row(idle(), start_prepared(started()), "Idle", &["SpawnStep"], "running, train pending ·")),
        row(idle(), start_prepared(finished()), "Idle", &["Finished"], "finished, train done ·"),
        row(running(t0), start_prepared(started()), "Running", &["AnswerStart"], "running pid 10, train running"),
        row(idle(), Event::BetweenSteps, "Idle", &["SpawnStep"], "running, train running"),
        // Launches.
        with(started(), row(idle(), launch_asked(1, false), "Launching", &["Launch"], "running, train pending ·")),
        with(started(), row(idle(), launch_asked(1, true), "Launching", &["Launch"], "running, train pending ·")),
        row(launching(false), launched(1), "Running", &["Supervise"], "running pid 20, train running"),
        row(launching(true), launched(1), "Running", &["Supervise", "AnswerStart"], "running pid 20, train running"),
        row(launching(false), launch_failed(1), "Idle", &["Failed"], "failed, train failed ·: sbatch: error"),
        row(launching(true), launch_failed(1), "Idle", &["Failed", "AnswerStart"], "failed, train failed ·: sbatch: error"),
        // A launch a stop abandoned: its worker cancelled.
        row(idle(), launched(0), "Idle", &["Cancel"], "running, train running"),
        row(launching(false), launched(0), "Launching", &["Cancel"], "running, train running"),
        row(idle(), launch_failed(0), "Idle", &[], "running, train running"),
        // Exits.
        row(running(t0), exited(1), "Idle", &["Judge"], "running, train running"),
        row(running(t0), exited(0), "Running", &[], "running pid 10, train running"),
        row(stopping(t0, Some(t0 + TIMEOUT)), exited(1), "Idle", &["Stopped"], "stopped, train pending ·"),
        row(killing_hung(t0), exited(1), "Idle", &["HungEnded"], "running, train running"),
        row(idle(), exited(1), "Idle", &[], "running, train running"),
        // An exit judged from the worker's files (what follows a failure is the policy's).
        row(idle(), judged(t0, Verdict::Success), "Idle", &["StepDone", "Finished"], "finished, train done ·"),
        with(two_steps(), row(idle(), judged(t0, Verdict::Success), "Idle", &["StepDone", "SpawnStep"], "running, train done ·")),
        row(idle(), gave_up(), "Idle", &["Failed"], "failed, train failed ·: exit code 1 three times at step 40"),
        row(idle(), judged(t0, Verdict::StoppedExternally), "Idle", &["StoppedOutside"], "stopped, train pending ·"),
        row(idle(), judged(t0, failed()), "Idle", &["WorkerFailed"], "running, train running, failure crash"),
        row(running(t0), judged(t0, Verdict::Success), "Running", &[], "running pid 10, train running"),
        // Hangs.
        row(running(t0), hung(handle(10)), "KillingHung", &["Terminate", "HungKillBegun"], "running pid 10, train running"),
        row(running_queued(t0), hung(queued_job()), "Running", &["QueuedNotHung"], "running job 7 PENDING, train running"),
        row(running(t0), hung(handle(99)), "Running", &[], "running pid 10, train running"),
        row(stopping(t0, Some(t0 + TIMEOUT)), hung(handle(10)), "Stopping", &[], "stopping pid 10, train running"),
        row(killing_hung(t0), hung(handle(10)), "KillingHung", &[], "running pid 10, train running"),
        // Stops.
        row(running(t0), stop_asked(), "Stopping", &["Terminate", "StopBegun"], "stopping pid 10, train running"),
        row(killing_hung(t0), stop_asked(), "Stopping", &["Terminate", "StopBegun"], "stopping pid 10, train running"),
        row(stopping(t0, Some(t0 + TIMEOUT)), stop_asked(), "Stopping", &[], "stopping pid 10, train running"),
        row(launching(false), stop_asked(), "Idle", &["StopDuringLaunch"], "stopped, train pending ·"),
        row(launching(true), stop_asked(), "Idle", &["StopDuringLaunch", "AnswerStart"], "stopped, train pending ·"),
        with(finished(), row(idle(), stop_asked(), "Idle", &["StopWithoutWorker"], "finished, train done ·")),
        row(backing_off(t0), stop_asked(), "Idle", &["StopWithoutWorker"], "stopped, train pending ·, restarts 1"),
        // Restarts.
        row(idle(), restart_decided(), "BackingOff", &[], "crashed, train running, restarts 2: exit code 1"),
        later(s(4), row(backing_off(t0), Event::TimerFired, "BackingOff", &[], "crashed, train running, restarts 1: exit code 1")),
        later(s(5), row(backing_off(t0), Event::TimerFired, "Idle", &["RestartDue"], "crashed, train running, restarts 1: exit code 1")),
        // Escalations.
        later(s(29), row(stopping(t0, Some(t0 + TIMEOUT)), Event::TimerFired, "Stopping", &[], "stopping pid 10, train running")),
        later(s(30), row(stopping(t0, Some(t0 + TIMEOUT)), Event::TimerFired, "Stopping", &["Kill"], "stopping pid 10, train running")),
        later(s(60), row(stopping(t0, None), Event::TimerFired, "Stopping", &[], "stopping pid 10, train running")),
        later(s(9), row(killing_hung(t0), Event::TimerFired, "KillingHung", &[], "running pid 10, train running")),
        later(s(10), row(killing_hung(t0), Event::TimerFired, "KillingHung", &["Kill"], "running pid 10, train running")),
        row(running(t0), Event::TimerFired, "Running", &[], "running pid 10, train running"),
        // A full disk: waited out, checked every few seconds off the actor.
        row(idle(), disk_full(t0), "WaitingForDisk", &["CheckDisk"], "waiting_for_disk, train running (? of 110 B free)"),
        row(checking(t0, false), disk_checked(50), "WaitingForDisk", &["DiskStillFull"], "waiting_for_disk, train running (50 of 110 B free)"),
        row(checking(t0, true), disk_checked(50), "WaitingForDisk", &["DiskStillFull"], "waiting_for_disk, train running (50 of 110 B free)"),
        row(checking(t0, true), disk_checked(500), "Idle", &["DiskBack"], "waiting_for_disk, train running"),
        // A check asked while the worker ran, back after it ended: not the wait's.
        row(checking(t0, false), running_checked(500), "WaitingForDisk", &[], "waiting_for_disk, train running (? of 110 B free)"),
        later(s(1), row(waiting(t0), Event::TimerFired, "WaitingForDisk", &[], "waiting_for_disk, train running (? of 110 B free)")),
        later(s(2), row(waiting(t0), Event::TimerFired, "WaitingForDisk", &["CheckDisk"], "waiting_for_disk, train running (? of 110 B free)")),
        row(waiting(t0), disk_checked(500), "WaitingForDisk", &[], "waiting_for_disk, train running (? of 110 B free)"),
        row(waiting(t0), stop_asked(), "Idle", &["StopWithoutWorker"], "stopped, train pending ·"),
        row(waiting(t0), launch_asked(2, true), "WaitingForDisk", &["AnswerStart"], "waiting_for_disk, train running (? of 110 B free)"),
        row(running(t0), disk_full(t0), "Running", &[], "running pid 10, train running"),
        row(idle(), disk_checked(500), "Idle", &[], "running, train running"),
        // The next save looked short while a worker runs: early retention.
        row(running(t0), running_checked(50), "Running", &["DiskCheckedRunning"], "running pid 10, train running"),
        // At daemon start.
        with(left_running(false), row(idle(), adopted(t0, false), "Running", &[], "running pid 10, train running")),
        with(left_running(true), row(idle(), adopted(t0, true), "Stopping", &[], "stopping pid 10, train running")),
        with(left_running(false), row(idle(), Event::FoundAtStart(Found::WorkerGone), "Idle", &[], "running, train running")),
        with(interrupted(true), row(idle(), Event::FoundAtStart(Found::StopOver), "Idle", &[], "stopped, train pending ·")),
        with(interrupted(false), row(idle(), resume_asked(true), "Idle", &["Resume"], "stopped, train pending ·")),
        with(interrupted(false), row(idle(), resume_asked(false), "Idle", &["StaysStopped"], "stopped, train pending ·")),
        with(finished(), row(idle(), resume_asked(true), "Idle", &[], "finished, train done ·")),
        // What the worker's Slurm job and heartbeats show.
        row(running_queued(t0), job_moved("RUNNING"), "Running", &[], "running job 7 RUNNING, train running"),
        row(stopping(t0, Some(t0 + TIMEOUT)), job_moved("RUNNING"), "Stopping", &[], "stopping job 7 RUNNING, train running"),
        row(idle(), job_moved("RUNNING"), "Idle", &[], "running, train running"),
        row(running(t0), interval("run-1", 2.5), "Running", &[], "running pid 10, train running; heartbeat interval 2.5 s"),
        row(running(t0), interval("run-0", 2.5), "Running", &[], "running pid 10, train running"),
        // A record that shows a restart pending, from the previous daemon or a rollback.
        with(record_of(&backing_off(t0)), row(idle(), restart_resumed(), "BackingOff", &[], "crashed, train running, restarts 1: exit code 1")),
        row(idle(), rolled_back(), "BackingOff", &[], "crashed, train running: loss diverged at step 40; rolled back"),
    ]
}

#[test]
fn transition_table() {
    let t0 = Instant::now();
    let mut wrong = Vec::new();
    for Row {
        from,
        record,
        event,
        after,
        to,
        effects,
        shows,
    } in table(t0)
    {
        let what = format!("{} + {} (at +{after:?})", from.name(), event.name());
        let (next, done) = step(from, &record, event, t0 + after);
        let (done, record) = performed(&done, record);
        let got = (next.name(), done.as_slice(), seen(&record));
        if got != (to, effects, shows.to_string()) {
            wrong.push(format!("{what}: {got:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "rows that do not hold:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_timers_are_set_from_the_clock_passed_in() {
    let t0 = Instant::now();
    let (next, _) = stepped(running(t0), stop_asked(), t0);
    assert_eq!(
        next.deadline(),
        Some(t0 + TIMEOUT),
        "SIGKILL at the stop timeout"
    );
    let (next, _) = stepped(running(t0), hung(handle(10)), t0);
    assert_eq!(next.deadline(), Some(t0 + GRACE), "SIGKILL after the grace");
    let (next, _) = stepped(idle(), restart_decided(), t0);
    assert_eq!(
        next.deadline(),
        Some(t0 + Duration::from_secs(5)),
        "the backoff"
    );
    let (next, _) = stepped(next, Event::TimerFired, t0 + Duration::from_secs(5));
    assert_eq!(next.deadline(), None, "no timer once the restart is due");
    let (next, _) = stepped(stopping(t0, Some(t0)), Event::TimerFired, t0);
    assert_eq!(next.deadline(), None, "SIGKILL sent once");
    let (next, _) = stepped(idle(), disk_full(t0), t0);
    assert_eq!(next.deadline(), None, "no timer while a check is out");
    let (next, effects) = stepped(next, disk_checked(50), t0);
    assert_eq!(
        next.deadline(),
        Some(t0 + Duration::from_secs(2)),
        "the next check"
    );
    assert_eq!(told_full(&effects), 1, "the wait begins, told once");
    let (next, _) = stepped(next, Event::TimerFired, t0 + Duration::from_secs(2));
    let (_, effects) = stepped(next, disk_checked(50), t0);
    assert_eq!(told_full(&effects), 0, "told once only");
}

/// How many of `effects` tell that the disk is full (the wait's first check).
fn told_full(effects: &[Effect]) -> usize {
    effects
        .iter()
        .filter(|e| matches!(e, Effect::DiskStillFull { first: true, .. }))
        .count()
}

#[test]
fn a_stop_while_stopping_waits_with_the_first() {
    let t0 = Instant::now();
    let (next, _) = stepped(running(t0), stop_asked(), t0);
    let (next, effects) = stepped(next, stop_asked(), t0);
    assert!(effects.is_empty(), "one SIGTERM");
    let Phase::Stopping { stop, .. } = next else {
        panic!("stopping");
    };
    assert_eq!(stop.waiters.len(), 2);
}

#[test]
fn a_launch_asked_while_busy_answers_the_start_and_launches_nothing() {
    let t0 = Instant::now();
    let (next, effects) = stepped(running(t0), launch_asked(2, true), t0);
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
    let (_, effects) = stepped(from, launch_failed(1), t0);
    let [
        Effect::Record(_),
        Effect::Failed {
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
    // The record's changes are the rows' `shows`.
    for effect in EFFECTS.into_iter().filter(|e| *e != "Record") {
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
