//! The phases of the pipeline's worker, and the data each one holds.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lavender::config::{PipelineStep, Scale};
use lavender::failure::Failure;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::exit::ExitOutcome;
use crate::pipeline::handle::{HungReport, StartError, StartReply};
use crate::pipeline::stop::{StopMark, StopReport};
use crate::process::WorkerHandle;
use lavender::pipeline_file::StopCause;

/// What the actor is doing about the pipeline's worker. The record's state says
/// how the pipeline shows (idle, stopped, finished, failed are all `Idle` here).
pub(crate) enum Phase {
    /// No worker, no launch waited for, no restart due.
    Idle,
    /// A step being launched off the actor (`sbatch` may take seconds); `start`: the
    /// start whose reply waits for this, its first step's launch.
    Launching {
        launch: Launching,
        start: Option<PendingStart>,
    },
    /// A worker runs and is supervised.
    Running { worker: LiveWorker },
    /// A stop: SIGTERM sent (the worker saves), SIGKILL once the timeout passes.
    Stopping { worker: LiveWorker, stop: Stop },
    /// A hung worker being killed (SIGTERM, SIGKILL after the grace); its exit
    /// restarts it.
    KillingHung {
        worker: LiveWorker,
        escalation: Escalation,
        report: HungReport,
    },
    /// A failed or hung worker waiting for its restart at `at` (the backoff).
    BackingOff { at: Instant, restart: Restart },
    /// A save found the disk full: no worker; the free space checked off the actor
    /// until the next save fits, then the worker brought back.
    WaitingForDisk { wait: DiskWaiting },
}

/// The phases in the order the diagram lists them.
pub(crate) const PHASES: [&str; 7] = [
    "Idle",
    "Launching",
    "Running",
    "Stopping",
    "KillingHung",
    "BackingOff",
    "WaitingForDisk",
];

impl Phase {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Phase::Idle => PHASES[0],
            Phase::Launching { .. } => PHASES[1],
            Phase::Running { .. } => PHASES[2],
            Phase::Stopping { .. } => PHASES[3],
            Phase::KillingHung { .. } => PHASES[4],
            Phase::BackingOff { .. } => PHASES[5],
            Phase::WaitingForDisk { .. } => PHASES[6],
        }
    }

    /// The worker that runs (being stopped or killed included).
    pub(crate) fn worker(&self) -> Option<&LiveWorker> {
        match self {
            Phase::Running { worker }
            | Phase::Stopping { worker, .. }
            | Phase::KillingHung { worker, .. } => Some(worker),
            Phase::Idle
            | Phase::Launching { .. }
            | Phase::BackingOff { .. }
            | Phase::WaitingForDisk { .. } => None,
        }
    }

    pub(crate) fn worker_mut(&mut self) -> Option<&mut LiveWorker> {
        match self {
            Phase::Running { worker }
            | Phase::Stopping { worker, .. }
            | Phase::KillingHung { worker, .. } => Some(worker),
            Phase::Idle
            | Phase::Launching { .. }
            | Phase::BackingOff { .. }
            | Phase::WaitingForDisk { .. } => None,
        }
    }

    /// When the phase's timer fires: the SIGKILL of a stop or a hung worker, the
    /// restart due, or the next check of the disk. At most one timer exists at a time.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self {
            Phase::Stopping { stop, .. } => stop.escalation.kill_at(),
            Phase::KillingHung { escalation, .. } => escalation.kill_at(),
            Phase::BackingOff { at, .. } => Some(*at),
            Phase::WaitingForDisk { wait } => wait.check_at,
            Phase::Idle | Phase::Launching { .. } | Phase::Running { .. } => None,
        }
    }
}

/// A worker the actor supervises.
pub(crate) struct LiveWorker {
    pub generation: u64,
    pub handle: WorkerHandle,
    pub step: PipelineStep,
    pub started: Instant,
    pub started_at: DateTime<Utc>,
    /// Spawned by this daemon (not re-adopted): its exit is reaped by us.
    pub own_child: bool,
    /// The step of the checkpoint it resumed from (see `WorkerRecord`).
    pub resumed_from_step: Option<u64>,
}

/// The step being launched off the actor.
pub(crate) struct Launching {
    pub generation: u64,
    pub step: PipelineStep,
    /// The checkpoint it resumes from, and that checkpoint's step when the daemon
    /// brings a training worker back (a restart, a resume).
    pub resume: Option<PathBuf>,
    pub resumed_from_step: Option<u64>,
    /// Why the daemon launches it again (from the run's latest complete
    /// checkpoint), for what it says once it runs; `None`: a step of a start.
    pub relaunch: Option<Relaunch>,
    /// When the launch began, in whole milliseconds: the worker may write before
    /// the launch reports back, and its records carry their time at that precision,
    /// so a record of its first millisecond is never older than its start.
    pub started_at: DateTime<Utc>,
}

impl Launching {
    /// Launched again after the worker before it ended: from its latest checkpoint.
    pub(crate) fn after_crash(&self) -> bool {
        self.relaunch.is_some()
    }
}

/// A step launched again by the daemon itself.
pub(crate) enum Relaunch {
    /// After a failure or a hang.
    Restart(Restart),
    /// At daemon start, a pipeline interrupted by the daemon's exit or a power loss.
    Resume(StopCause),
}

/// A restart the policy decided.
pub(crate) struct Restart {
    /// Why (`None`: decided by a daemon before this one).
    pub why: Option<PendingRestart>,
    /// How the worker ended: the "failed" alert tells it if the restart cannot start.
    pub last_exit: Option<ExitOutcome>,
}

/// Why the restart that is due was decided, for what it says once started.
pub(crate) enum PendingRestart {
    Hung(HungReport),
    Failed(Failure),
    /// A divergence rolled back (`rollback.rs`); `message` says to what.
    RolledBack {
        failure: Failure,
        message: String,
    },
}

impl PendingRestart {
    /// The failure behind it (a hang has none).
    pub(crate) fn failure(&self) -> Option<&Failure> {
        match self {
            PendingRestart::Failed(f) | PendingRestart::RolledBack { failure: f, .. } => Some(f),
            PendingRestart::Hung(_) => None,
        }
    }
}

/// A wait for disk space after a save found the disk full.
pub(crate) struct DiskWaiting {
    /// The restart once the next save fits (from the latest verified checkpoint).
    pub restart: Restart,
    /// When the next check is due; `None` while one is out.
    pub check_at: Option<Instant>,
    /// Between two checks.
    pub every: Duration,
    /// The wait was told (the alert, the record): its end is told too.
    pub told: bool,
}

/// A start whose reply waits for its first step's launch.
pub(crate) struct PendingStart {
    pub reply: oneshot::Sender<Result<StartReply, StartError>>,
    pub chunk: u32,
    pub scale: Scale,
    pub notices: Vec<String>,
    pub config_line: String,
}

/// A stop under way.
pub(crate) struct Stop {
    pub escalation: Escalation,
    pub waiters: Vec<oneshot::Sender<StopReport>>,
    pub mark: StopMark,
    /// A stop for the previous daemon's exit, finished by this one: resume after it
    /// (as the start of this daemon would have).
    pub resume_after: bool,
}

/// How far the signals to a worker being ended have gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Escalation {
    /// SIGTERM sent; SIGKILL at `kill_at`.
    Term { kill_at: Instant },
    /// SIGKILL sent.
    Killed,
}

impl Escalation {
    pub(crate) fn kill_at(self) -> Option<Instant> {
        match self {
            Escalation::Term { kill_at } => Some(kill_at),
            Escalation::Killed => None,
        }
    }

    pub(crate) fn killed(self) -> bool {
        self == Escalation::Killed
    }
}
