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
use lavender::pipeline_file::{RecordEvent, StopCause};
use lavender::steps::inputs::LocalFiles;

pub(crate) enum Effect {
    /// The record changes (`PipelineRecord::apply`): what the status shows and a
    /// daemon restart reads back. Written once the step's effects are performed.
    Record(RecordEvent),
    /// Launch worker `generation` off the actor; it reports back with a `LaunchDone`.
    Launch {
        generation: u64,
        spec: Box<SpawnSpec>,
    },
    /// The launched worker runs (the phase holds it): record it, say why it was
    /// launched again, watch its exit.
    Supervise { launch: Launching },
    /// Launch the next step off the actor (`start`: the start whose reply waits).
    SpawnStep {
        step: PipelineStep,
        start: Option<PendingStart>,
    },
    /// At daemon start, an interrupted pipeline's `step` launched again from its
    /// run's latest checkpoint (`cause`: what interrupted it).
    Resume {
        step: PipelineStep,
        cause: StopCause,
    },
    /// At daemon start, an interrupted pipeline left stopped (resume on start is
    /// off): the log says how to continue it.
    StaysStopped {
        step: PipelineStep,
        cause: StopCause,
    },
    /// Every step is done (the record says finished): told, old runs pruned, the
    /// start that waited answered.
    Finished { start: Option<PendingStart> },
    /// The pipeline failed (the record says so): logged and told, after a crash with
    /// that crash's exit and failure.
    Failed {
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
    StopBegun { timeout: Duration },
    /// A stop with no worker running: nothing to stop, or (`cancelled`) the restart
    /// due cancelled.
    StopWithoutWorker {
        cancelled: bool,
        reply: oneshot::Sender<StopReport>,
    },
    /// A stop during a launch: the pipeline stops now; the launch, once back, is
    /// cancelled.
    StopDuringLaunch {
        step: PipelineStep,
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
    /// The step's work is done (its markers written): in the decision log.
    StepDone { step: PipelineStep },
    /// A SIGTERM from outside lavenderd stopped the worker: the pipeline stays
    /// stopped (told by an alert).
    StoppedOutside { step: PipelineStep },
    /// The worker failed: a checkpoint set aside, a wait for disk, or the policy.
    WorkerFailed {
        worker: LiveWorker,
        failure: Failure,
        outcome: ExitOutcome,
        last_step: Option<u64>,
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
pub(crate) const EFFECTS: [&str; 28] = [
    "Record",
    "Launch",
    "Supervise",
    "SpawnStep",
    "Resume",
    "StaysStopped",
    "Finished",
    "Failed",
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
    "StepDone",
    "StoppedOutside",
    "WorkerFailed",
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
            Effect::Record(_) => EFFECTS[0],
            Effect::Launch { .. } => EFFECTS[1],
            Effect::Supervise { .. } => EFFECTS[2],
            Effect::SpawnStep { .. } => EFFECTS[3],
            Effect::Resume { .. } => EFFECTS[4],
            Effect::StaysStopped { .. } => EFFECTS[5],
            Effect::Finished { .. } => EFFECTS[6],
            Effect::Failed { .. } => EFFECTS[7],
            Effect::Cancel { .. } => EFFECTS[8],
            Effect::AnswerStart(_) => EFFECTS[9],
            Effect::Terminate { .. } => EFFECTS[10],
            Effect::Kill { .. } => EFFECTS[11],
            Effect::StopBegun { .. } => EFFECTS[12],
            Effect::StopWithoutWorker { .. } => EFFECTS[13],
            Effect::StopDuringLaunch { .. } => EFFECTS[14],
            Effect::Stopped { .. } => EFFECTS[15],
            Effect::HungKillBegun { .. } => EFFECTS[16],
            Effect::QueuedNotHung { .. } => EFFECTS[17],
            Effect::Judge { .. } => EFFECTS[18],
            Effect::StepDone { .. } => EFFECTS[19],
            Effect::StoppedOutside { .. } => EFFECTS[20],
            Effect::WorkerFailed { .. } => EFFECTS[21],
            Effect::HungEnded { .. } => EFFECTS[22],
            Effect::RestartDue(_) => EFFECTS[23],
            Effect::CheckDisk { .. } => EFFECTS[24],
            Effect::DiskStillFull { .. } => EFFECTS[25],
            Effect::DiskBack { .. } => EFFECTS[26],
            Effect::DiskCheckedRunning(_) => EFFECTS[27],
        }
    }
}
