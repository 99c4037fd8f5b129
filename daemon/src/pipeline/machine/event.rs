//! What moves the phase: what the actor heard (a command, a launch or an exit
//! reported back, its timer) and what it decided from the files (a restart).

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::oneshot;

use super::phase::{DiskWaiting, Launching, LiveWorker, PendingStart, Restart, Stop};
use crate::exit::ExitOutcome;
use crate::pipeline::handle::HungReport;
use crate::pipeline::judge::Verdict;
use crate::pipeline::save_room::DiskCheck;
use crate::pipeline::stop::{StopMark, StopReport};
use crate::process::{SpawnSpec, WorkerHandle};
use lavender::config::PipelineStep;
use lavender::failure::Failure;
use lavender::pipeline_file::{PipelineRecord, SlurmJob, StopCause};
use lavender::skips::SkipRange;
use lavender::status::DiskWait;
use lavender::steps::inputs::LocalFiles;

pub(crate) enum Event {
    /// A start prepared its pipeline's record (the run, its steps): its first
    /// pending step follows, or the finish.
    StartPrepared {
        record: Box<PipelineRecord>,
        start: PendingStart,
    },
    /// At daemon start, a record that says running with no worker: the daemon died
    /// between two steps; the next one follows.
    BetweenSteps,
    /// A step to launch: a start's first step (`start`), the next step, a restart
    /// due, a resume at daemon start.
    LaunchAsked {
        launch: Launching,
        spec: Box<SpawnSpec>,
        start: Option<PendingStart>,
    },
    /// Launch `generation` reported back: its worker, or why it could not start.
    LaunchFinished {
        generation: u64,
        result: Result<WorkerHandle, String>,
    },
    /// Worker `generation` ended, with the local files its step read as they were then.
    WorkerExited {
        generation: u64,
        outcome: ExitOutcome,
        files: LocalFiles,
    },
    /// The worker that ended by itself (`Effect::Judge`) judged from its files:
    /// `last_step`, the training step it last reported.
    ExitJudged {
        worker: LiveWorker,
        outcome: ExitOutcome,
        verdict: Verdict,
        last_step: Option<u64>,
    },
    /// The pipeline fails at `step`: the policy gave up on its worker, a lost
    /// Slurm node under `on_node_failure: fail`, a checkpoint that cannot be set
    /// aside.
    GaveUp {
        step: PipelineStep,
        reason: String,
        last_exit: Option<ExitOutcome>,
        failure: Option<Failure>,
    },
    /// The watchdog found the worker hung; `grace`: until SIGKILL; `said`: what the
    /// record says of it ("hung at step 40 for 5m 0s…").
    HungJudged {
        report: HungReport,
        grace: Duration,
        said: String,
    },
    /// A stop; `timeout`: until SIGKILL; `mark`: where it began.
    StopAsked {
        timeout: Duration,
        cause: StopCause,
        reply: oneshot::Sender<StopReport>,
        mark: StopMark,
    },
    /// The policy restarts the worker that ended after `delay`; `crash`: what the
    /// record says until it runs again (`None`: a restart the record already shows,
    /// decided by a daemon before this one).
    RestartDecided {
        delay: Duration,
        restart: Restart,
        crash: Option<Crash>,
    },
    /// At daemon start, a worker of the previous daemon found alive (`stop`: its
    /// stop was under way), or found ended (its exit follows).
    Adopted {
        worker: LiveWorker,
        stop: Option<Stop>,
    },
    /// The phase's deadline may have passed (`Phase::deadline`).
    TimerFired,
    /// The worker that ended said the disk is full (`error`): wait for space;
    /// `shown`: the wait as the status shows it until the first check.
    DiskFullJudged {
        wait: DiskWaiting,
        error: String,
        shown: DiskWait,
    },
    /// A check of the disk (`pipeline/save_room.rs`) reported back.
    DiskChecked(DiskCheck),
    /// The worker's Slurm job moved (queued, running on a node, requeued…).
    SlurmJobMoved(SlurmJob),
    /// At daemon start, what the record did not know yet: its worker ended while
    /// no daemon watched, or its stop finished.
    FoundAtStart(Found),
    /// At daemon start, a pipeline the previous daemon's exit or a power loss
    /// (`cause`) interrupted: its next step resumes from its run's latest
    /// checkpoint, or, with `supervisor.resume_on_start` off, it stays stopped.
    ResumeAsked {
        cause: StopCause,
        resume_on_start: bool,
    },
    /// The watchdog learned a longer steady interval between two heartbeats of the
    /// run in `run_dir`.
    IntervalLearned { run_dir: PathBuf, longest_s: f64 },
}

/// What a daemon found at its start that the record does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// The worker the record names is gone without a word, and the daemon with it.
    WorkerGone,
    /// The stop the record says is under way has no worker left: it is over.
    StopOver,
}

/// A restart's crash, as the record shows it until the worker runs again.
pub(crate) struct Crash {
    pub error: String,
    /// The restart's count, as the policy gave it (`None`: not counted, as after a
    /// checkpoint set aside).
    pub restarts: Option<u32>,
    /// A divergence rolled back: the range of data skipped from now on.
    pub rolled_back: Option<SkipRange>,
}

/// The events by name (`LaunchFinished` and `Adopted` by how they went), as the diagram labels them.
pub(crate) const EVENTS: [&str; 26] = [
    "StartPrepared",
    "StartPrepared nothing left",
    "BetweenSteps",
    "LaunchAsked",
    "LaunchFinished ok",
    "LaunchFinished failed",
    "WorkerExited",
    "ExitJudged done",
    "ExitJudged stopped outside",
    "ExitJudged failed",
    "GaveUp",
    "HungJudged",
    "StopAsked",
    "RestartDecided",
    "Adopted",
    "Adopted stopping",
    "TimerFired",
    "DiskFullJudged",
    "DiskChecked fits",
    "DiskChecked short",
    "SlurmJobMoved",
    "IntervalLearned",
    "FoundAtStart worker gone",
    "FoundAtStart stop over",
    "ResumeAsked",
    "ResumeAsked stays stopped",
];

impl Event {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Event::StartPrepared { record, .. } if record.next_step().is_some() => EVENTS[0],
            Event::StartPrepared { .. } => EVENTS[1],
            Event::BetweenSteps => EVENTS[2],
            Event::LaunchAsked { .. } => EVENTS[3],
            Event::LaunchFinished { result: Ok(_), .. } => EVENTS[4],
            Event::LaunchFinished { result: Err(_), .. } => EVENTS[5],
            Event::WorkerExited { .. } => EVENTS[6],
            Event::ExitJudged { verdict, .. } => match verdict {
                Verdict::Success => EVENTS[7],
                Verdict::StoppedExternally => EVENTS[8],
                Verdict::Failed { .. } => EVENTS[9],
            },
            Event::GaveUp { .. } => EVENTS[10],
            Event::HungJudged { .. } => EVENTS[11],
            Event::StopAsked { .. } => EVENTS[12],
            Event::RestartDecided { .. } => EVENTS[13],
            Event::Adopted { stop: None, .. } => EVENTS[14],
            Event::Adopted { stop: Some(_), .. } => EVENTS[15],
            Event::TimerFired => EVENTS[16],
            Event::DiskFullJudged { .. } => EVENTS[17],
            Event::DiskChecked(c) if c.fits() => EVENTS[18],
            Event::DiskChecked(_) => EVENTS[19],
            Event::SlurmJobMoved(_) => EVENTS[20],
            Event::IntervalLearned { .. } => EVENTS[21],
            Event::FoundAtStart(Found::WorkerGone) => EVENTS[22],
            Event::FoundAtStart(Found::StopOver) => EVENTS[23],
            Event::ResumeAsked {
                resume_on_start: true,
                ..
            } => EVENTS[24],
            Event::ResumeAsked { .. } => EVENTS[25],
        }
    }
}
