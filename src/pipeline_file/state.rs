//! The record's state, each variant holding exactly the fields that exist in it
//! (a worker only while running or stopping, a stop's cause only once stopping, a
//! disk wait only while waiting). `pipeline.json` keeps the flat form earlier
//! versions wrote; [`RecordState::from_flat`] reads it, [`RecordState::to_flat`]
//! writes it.

use serde::{Deserialize, Serialize};

use super::worker::WorkerRecord;
use crate::status::{DiskWait, PipelineState};

/// Why a pipeline that is not running stopped; what the next daemon start does
/// with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// `lavenderd stop`, `POST /pipeline/stop`: it stays stopped.
    Operator,
    /// The daemon was told to exit (SIGTERM/SIGINT from a service manager or a
    /// shutdown): the next daemon resumes it (`supervisor.resume_on_start`).
    DaemonExit,
    /// The worker saved and exited on a SIGTERM lavenderd did not send: it stays stopped.
    External,
    /// The daemon and the worker were gone without a word (a power loss, a reboot,
    /// both killed) and `resume_on_start` was off: a later start resumes it.
    PowerLoss,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RecordState {
    /// No pipeline yet.
    Idle,
    /// A worker runs; `None` while a step is being launched (between two steps,
    /// or a start's first launch).
    Running { worker: Option<WorkerRecord> },
    /// A stop is under way: the worker got its SIGTERM and saves. `cause` is `None`
    /// in records written before causes were kept.
    Stopping {
        cause: Option<StopCause>,
        worker: Option<WorkerRecord>,
    },
    /// Stopped; the cause says what the next daemon start does with it.
    Stopped { cause: Option<StopCause> },
    /// A worker failed or hung and its restart is due (after the backoff).
    Crashed,
    /// A save found the disk full: the worker comes back once the next save fits.
    /// `wait` is `None` once space is back, until the worker runs.
    WaitingForDisk { wait: Option<DiskWait> },
    /// The pipeline failed (`last_error` says why).
    Failed,
    /// Every step is done.
    Finished,
}

/// The flat fields `pipeline.json` keeps the state in (every version's form).
pub(super) struct FlatState {
    pub state: PipelineState,
    pub worker: Option<WorkerRecord>,
    pub restart_pending: bool,
    pub stop_cause: Option<StopCause>,
    pub disk_wait: Option<DiskWait>,
}

impl RecordState {
    /// The state `kind` holding nothing (no worker, cause or wait yet): a record
    /// built whole, as tests and fixtures build one.
    pub fn of_kind(kind: PipelineState) -> RecordState {
        RecordState::from_flat(FlatState {
            state: kind,
            worker: None,
            restart_pending: false,
            stop_cause: None,
            disk_wait: None,
        })
    }

    /// The state as `/status` names it.
    pub fn kind(&self) -> PipelineState {
        match self {
            RecordState::Idle => PipelineState::Idle,
            RecordState::Running { .. } => PipelineState::Running,
            RecordState::Stopping { .. } => PipelineState::Stopping,
            RecordState::Stopped { .. } => PipelineState::Stopped,
            RecordState::Crashed => PipelineState::Crashed,
            RecordState::WaitingForDisk { .. } => PipelineState::WaitingForDisk,
            RecordState::Failed => PipelineState::Failed,
            RecordState::Finished => PipelineState::Finished,
        }
    }

    /// The worker the record names (running or stopping).
    pub fn worker(&self) -> Option<&WorkerRecord> {
        match self {
            RecordState::Running { worker } | RecordState::Stopping { worker, .. } => {
                worker.as_ref()
            }
            _ => None,
        }
    }

    /// Why the pipeline stops or stopped.
    pub fn stop_cause(&self) -> Option<StopCause> {
        match self {
            RecordState::Stopping { cause, .. } | RecordState::Stopped { cause } => *cause,
            _ => None,
        }
    }

    /// Why the pipeline waits for disk space (`pipeline.disk_wait`).
    pub fn disk_wait(&self) -> Option<&DiskWait> {
        match self {
            RecordState::WaitingForDisk { wait } => wait.as_ref(),
            _ => None,
        }
    }

    /// The daemon brings the worker back by itself: after a crash's backoff, or
    /// once the disk has room.
    pub fn restart_pending(&self) -> bool {
        matches!(
            self,
            RecordState::Crashed | RecordState::WaitingForDisk { .. }
        )
    }

    /// The state of a flat record as any version wrote it. Fields that do not
    /// belong to the state are dropped: no version wrote them together (a worker
    /// is cleared before the state leaves running or stopping, a cause is cleared
    /// by the launch after a stop, a crash always has its restart pending).
    pub(super) fn from_flat(flat: FlatState) -> RecordState {
        let FlatState {
            state,
            worker,
            restart_pending: _,
            stop_cause,
            disk_wait,
        } = flat;
        match state {
            PipelineState::Idle => RecordState::Idle,
            PipelineState::Running => RecordState::Running { worker },
            PipelineState::Stopping => RecordState::Stopping {
                cause: stop_cause,
                worker,
            },
            PipelineState::Stopped => RecordState::Stopped { cause: stop_cause },
            PipelineState::Crashed => RecordState::Crashed,
            PipelineState::WaitingForDisk => RecordState::WaitingForDisk { wait: disk_wait },
            PipelineState::Failed => RecordState::Failed,
            PipelineState::Finished => RecordState::Finished,
        }
    }

    /// The flat fields `pipeline.json` keeps (the form earlier versions read).
    pub(super) fn to_flat(&self) -> FlatState {
        FlatState {
            state: self.kind(),
            worker: self.worker().cloned(),
            restart_pending: self.restart_pending(),
            stop_cause: self.stop_cause(),
            disk_wait: self.disk_wait().cloned(),
        }
    }
}
