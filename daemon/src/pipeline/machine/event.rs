//! What moves the phase: what the actor heard (a command, a launch or an exit
//! reported back, its timer) and what it decided from the files (a restart).

use std::time::Duration;

use tokio::sync::oneshot;

use super::phase::{DiskWaiting, Launching, LiveWorker, PendingStart, Restart, Stop};
use crate::exit::ExitOutcome;
use crate::pipeline::handle::HungReport;
use crate::pipeline::save_room::DiskCheck;
use crate::pipeline::stop::{StopMark, StopReport};
use crate::process::{SpawnSpec, WorkerHandle};
use lavender::pipeline_file::StopCause;
use lavender::steps::inputs::LocalFiles;

pub(crate) enum Event {
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
    /// The watchdog found the worker hung; `grace`: until SIGKILL.
    HungJudged { report: HungReport, grace: Duration },
    /// A stop; `timeout`: until SIGKILL; `mark`: where it began.
    StopAsked {
        timeout: Duration,
        cause: StopCause,
        reply: oneshot::Sender<StopReport>,
        mark: StopMark,
    },
    /// The policy restarts the worker that ended after `delay`.
    RestartDecided { delay: Duration, restart: Restart },
    /// At daemon start, a worker of the previous daemon found alive (`stop`: its
    /// stop was under way), or found ended (its exit follows).
    Adopted {
        worker: LiveWorker,
        stop: Option<Stop>,
    },
    /// The phase's deadline may have passed (`Phase::deadline`).
    TimerFired,
    /// The worker that ended said the disk is full: wait for space.
    DiskFullJudged { wait: DiskWaiting },
    /// A check of the disk (`pipeline/save_room.rs`) reported back.
    DiskChecked(DiskCheck),
}

/// The events by name (`LaunchFinished` and `Adopted` by how they went), as the diagram labels them.
pub(crate) const EVENTS: [&str; 13] = [
    "LaunchAsked",
    "LaunchFinished ok",
    "LaunchFinished failed",
    "WorkerExited",
    "HungJudged",
    "StopAsked",
    "RestartDecided",
    "Adopted",
    "Adopted stopping",
    "TimerFired",
    "DiskFullJudged",
    "DiskChecked fits",
    "DiskChecked short",
];

impl Event {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Event::LaunchAsked { .. } => EVENTS[0],
            Event::LaunchFinished { result: Ok(_), .. } => EVENTS[1],
            Event::LaunchFinished { result: Err(_), .. } => EVENTS[2],
            Event::WorkerExited { .. } => EVENTS[3],
            Event::HungJudged { .. } => EVENTS[4],
            Event::StopAsked { .. } => EVENTS[5],
            Event::RestartDecided { .. } => EVENTS[6],
            Event::Adopted { stop: None, .. } => EVENTS[7],
            Event::Adopted { stop: Some(_), .. } => EVENTS[8],
            Event::TimerFired => EVENTS[9],
            Event::DiskFullJudged { .. } => EVENTS[10],
            Event::DiskChecked(c) if c.fits() => EVENTS[11],
            Event::DiskChecked(_) => EVENTS[12],
        }
    }
}
