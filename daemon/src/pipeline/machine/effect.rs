//! What a step asks the actor to do (`actor/effects.rs` performs it).

use std::time::Duration;

use lavender::config::PipelineStep;
use lavender::failure::Failure;
use tokio::sync::oneshot;

use super::phase::{Launching, LiveWorker, PendingStart, Restart, Stop};
use crate::exit::ExitOutcome;
use crate::pipeline::handle::HungReport;
use crate::pipeline::save_room::DiskCheck;
use crate::pipeline::stop::StopReport;
use crate::process::{SpawnSpec, WorkerHandle};
use lavender::pipeline_file::StopCause;
use lavender::steps::inputs::LocalFiles;

pub(crate) enum Effect {
    /// Launch worker `generation` off the actor; it reports back with a `LaunchDone`.
    Launch {
        generation: u64,
        spec: Box<SpawnSpec>,
    },
    /// The launched worker runs (the phase holds it): record it, say why it was
    /// launched again, watch its exit.
    Supervise { launch: Launching },
    /// The launch failed: the pipeline fails (after a crash, with that crash's exit
    /// and failure).
    LaunchFailed {
        step: PipelineStep,
        reason: String,
        last_exit: Option<ExitOutcome>,
        failure: Option<Failure>,
    },
    /// The worker of a launch a stop abandoned: SIGKILL it (it has not trained yet).
    Cancel { handle: WorkerHandle },
    /// Answer the start that waited for its first launch, from the record as it is.
    AnswerStart(PendingStart),
    /// SIGTERM to the worker's process group or Slurm job.
    Terminate {
        handle: WorkerHandle,
        own_child: bool,
    },
    /// SIGKILL to the worker's process group or Slurm job.
    Kill {
        handle: WorkerHandle,
        own_child: bool,
        reason: KillReason,
    },
    /// A stop began (after its SIGTERM): the record says stopping.
    StopBegun { cause: StopCause, timeout: Duration },
    /// A stop with no worker running: nothing to stop, or the restart due cancelled.
    StopWithoutWorker {
        cause: StopCause,
        reply: oneshot::Sender<StopReport>,
    },
    /// A stop during a launch: the pipeline stops now; the launch, once back, is
    /// cancelled.
    StopDuringLaunch {
        step: PipelineStep,
        cause: StopCause,
        reply: oneshot::Sender<StopReport>,
    },
    /// The worker of a stop exited: what it saved reported to who asked.
    Stopped {
        worker: LiveWorker,
        stop: Stop,
        outcome: ExitOutcome,
    },
    /// A hung worker is being killed (after its SIGTERM): the record says why.
    HungKillBegun { report: HungReport, grace: Duration },
    /// The watchdog's report about a Slurm job waiting in the queue: nothing runs
    /// that could beat, so not hung.
    QueuedNotHung { handle: WorkerHandle },
    /// A running worker ended: judge how (next step, stopped from outside, failed).
    Judge {
        worker: LiveWorker,
        outcome: ExitOutcome,
        files: LocalFiles,
    },
    /// A hung worker's kill is done: the policy restarts it, or fails the pipeline.
    HungEnded {
        worker: LiveWorker,
        report: HungReport,
        outcome: ExitOutcome,
    },
    /// The backoff passed: relaunch the active step from its latest checkpoint.
    RestartDue(Restart),
    /// Check the disk off the actor (free space, the next save's need, early
    /// retention); it reports back with a `DiskChecked`. `first`: right after the
    /// save that found it full.
    CheckDisk { first: bool },
    /// The next save does not fit yet: the record says so (`first`: the wait
    /// begins, told by an alert and in the decision log).
    DiskStillFull { check: DiskCheck, first: bool },
    /// The next save fits: the worker is brought back (`told`: the wait was told,
    /// so its end is too).
    DiskBack {
        check: DiskCheck,
        restart: Restart,
        told: bool,
    },
    /// A check made while a worker runs (the next save looked short): early
    /// retention done, an alert if it still does not fit.
    DiskCheckedRunning(DiskCheck),
}

/// Why a worker gets SIGKILL, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KillReason {
    StopTimeout,
    HungGrace,
}

/// The effects by name, as the diagram labels them.
pub(crate) const EFFECTS: [&str; 20] = [
    "Launch",
    "Supervise",
    "LaunchFailed",
    "Cancel",
    "AnswerStart",
    "Terminate",
    "Kill",
    "StopBegun",
    "StopWithoutWorker",
    "StopDuringLaunch",
    "Stopped",
    "HungKillBegun",
    "QueuedNotHung",
    "Judge",
    "HungEnded",
    "RestartDue",
    "CheckDisk",
    "DiskStillFull",
    "DiskBack",
    "DiskCheckedRunning",
];

impl Effect {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Effect::Launch { .. } => EFFECTS[0],
            Effect::Supervise { .. } => EFFECTS[1],
            Effect::LaunchFailed { .. } => EFFECTS[2],
            Effect::Cancel { .. } => EFFECTS[3],
            Effect::AnswerStart(_) => EFFECTS[4],
            Effect::Terminate { .. } => EFFECTS[5],
            Effect::Kill { .. } => EFFECTS[6],
            Effect::StopBegun { .. } => EFFECTS[7],
            Effect::StopWithoutWorker { .. } => EFFECTS[8],
            Effect::StopDuringLaunch { .. } => EFFECTS[9],
            Effect::Stopped { .. } => EFFECTS[10],
            Effect::HungKillBegun { .. } => EFFECTS[11],
            Effect::QueuedNotHung { .. } => EFFECTS[12],
            Effect::Judge { .. } => EFFECTS[13],
            Effect::HungEnded { .. } => EFFECTS[14],
            Effect::RestartDue(_) => EFFECTS[15],
            Effect::CheckDisk { .. } => EFFECTS[16],
            Effect::DiskStillFull { .. } => EFFECTS[17],
            Effect::DiskBack { .. } => EFFECTS[18],
            Effect::DiskCheckedRunning(_) => EFFECTS[19],
        }
    }
}
