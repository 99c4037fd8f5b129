//! The one place the daemon changes its pipeline record: each thing that happens to
//! the pipeline is a [`RecordEvent`], and [`PipelineRecord::apply`] is the record
//! after it. The actor (`daemon/src/pipeline/actor/`) turns what its state machine
//! decides into these events; it assigns no field itself. The transitions a person
//! sees in `/status` are the rows of the table test below.

use std::path::PathBuf;

use super::{PipelineRecord, RecordState, SlurmJob, StopCause, WorkerHandle, WorkerRecord};
use crate::config::PipelineStep;
use crate::failure::{Failure, SameFailure};
use crate::skips::SkipRange;
use crate::status::{DiskWait, Recovery, StepState};

#[derive(Debug, Clone, PartialEq)]
pub enum RecordEvent {
    /// A start prepared the new pipeline's record (running, no worker yet).
    Started(Box<PipelineRecord>),
    /// A worker runs `worker.step`: launched, restarted or resumed.
    WorkerRunning(WorkerRecord),
    /// The daemon found the worker its predecessor left still running.
    Adopted,
    /// The worker the record names ended.
    WorkerEnded,
    /// The worker's Slurm job moved (queued, running on a node, requeued…).
    SlurmJobSeen(SlurmJob),
    /// `step` is done: the next one (or the finish) follows.
    StepDone { step: PipelineStep },
    /// Every step is done.
    Finished,
    /// A stop sent its SIGTERM: the worker saves.
    StopBegun { cause: StopCause },
    /// The worker of a stop ended (or no worker was left to stop it): stopped,
    /// for the cause the stop began with; `step` runs again at the next start.
    StopDone { step: Option<PipelineStep> },
    /// Stopped with no stop under way: the worker stopped from outside, a pending
    /// restart or a launch cancelled, an interrupted pipeline not resumed.
    Stopped {
        step: Option<PipelineStep>,
        cause: StopCause,
    },
    /// The worker failed with `failure` (what the status shows, before the policy).
    WorkerFailed(Failure),
    /// The policy's counts after a worker's end: `reset` when it ran long enough
    /// for a fresh restart count.
    Counted {
        reset: bool,
        no_progress_restarts: u32,
        same_failure: Option<SameFailure>,
    },
    /// A restart is due: crashed until the worker runs again. `restarts`: the count
    /// the policy gave this restart (a checkpoint set aside is not counted).
    Crashed {
        error: String,
        restarts: Option<u32>,
    },
    /// A divergence rolled back: the range is skipped and the worker restarts.
    RolledBack { range: SkipRange, error: String },
    /// The pipeline failed at `step`.
    Failed { step: PipelineStep, reason: String },
    /// A save found the disk full: the pipeline waits for space.
    DiskFull { error: String, wait: DiskWait },
    /// A check while waiting for disk: where, how much is needed and free.
    DiskWaitSeen(DiskWait),
    /// The next save fits: the worker is brought back.
    DiskBack,
    /// The worker stopped beating and is killed to be restarted.
    Hung { error: String },
    /// The daemon brought the run back by itself (status `pipeline.recovery`).
    Recovered(Recovery),
    /// A start's launch resumes from another checkpoint than it named.
    ResumeFrom(Option<PathBuf>),
    /// The longest steady interval between two heartbeats seen in this run.
    HeartbeatInterval(f64),
}

impl PipelineRecord {
    /// The record after `event`; the only function that changes a record's fields.
    pub fn apply(&mut self, event: RecordEvent) {
        match event {
            RecordEvent::Started(record) => *self = *record,
            RecordEvent::WorkerRunning(worker) => {
                let step = worker.step;
                self.state = RecordState::Running {
                    worker: Some(worker),
                };
                self.active_step = Some(step);
                self.set_step(step, StepState::Running);
            }
            RecordEvent::Adopted => {
                let worker = self.state.worker().cloned();
                self.state = RecordState::Running { worker };
            }
            RecordEvent::WorkerEnded => match &mut self.state {
                RecordState::Running { worker } | RecordState::Stopping { worker, .. } => {
                    *worker = None;
                }
                _ => {}
            },
            RecordEvent::SlurmJobSeen(job) => match &mut self.state {
                RecordState::Running {
                    worker: Some(worker),
                }
                | RecordState::Stopping {
                    worker: Some(worker),
                    ..
                } => worker.handle = WorkerHandle::Slurm { slurm: job },
                _ => {}
            },
            RecordEvent::StepDone { step } => {
                self.set_step(step, StepState::Done);
                self.active_step = None;
                self.same_failure = None;
            }
            RecordEvent::Finished => {
                self.state = RecordState::Finished;
                self.active_step = None;
            }
            RecordEvent::StopBegun { cause } => {
                let worker = self.state.worker().cloned();
                self.state = RecordState::Stopping {
                    cause: Some(cause),
                    worker,
                };
            }
            RecordEvent::StopDone { step } => {
                let cause = self.state.stop_cause();
                self.stopped(step, cause);
            }
            RecordEvent::Stopped { step, cause } => self.stopped(step, Some(cause)),
            RecordEvent::WorkerFailed(failure) => self.failure = Some(failure),
            RecordEvent::Counted {
                reset,
                no_progress_restarts,
                same_failure,
            } => {
                if reset {
                    self.restarts = 0;
                }
                self.no_progress_restarts = no_progress_restarts;
                self.same_failure = same_failure;
            }
            RecordEvent::Crashed { error, restarts } => {
                if let Some(restarts) = restarts {
                    self.restarts = restarts;
                }
                self.state = RecordState::Crashed;
                self.last_error = Some(error);
            }
            RecordEvent::RolledBack { range, error } => {
                self.rollbacks.push(range);
                self.state = RecordState::Crashed;
                self.last_error = Some(error);
            }
            RecordEvent::Failed { step, reason } => {
                self.state = RecordState::Failed;
                self.set_step(step, StepState::Failed);
                self.last_error = Some(reason);
            }
            RecordEvent::DiskFull { error, wait } => {
                self.state = RecordState::WaitingForDisk { wait: Some(wait) };
                self.last_error = Some(error);
            }
            // Only a wait has a wait's numbers; a stop or a relaunch ended it.
            RecordEvent::DiskWaitSeen(seen) => {
                if let RecordState::WaitingForDisk { wait } = &mut self.state {
                    *wait = Some(seen);
                }
            }
            RecordEvent::DiskBack => {
                if let RecordState::WaitingForDisk { wait } = &mut self.state {
                    *wait = None;
                }
            }
            RecordEvent::Hung { error } => self.last_error = Some(error),
            RecordEvent::Recovered(recovery) => self.recovery = Some(recovery),
            RecordEvent::ResumeFrom(from) => self.resume_from = from,
            RecordEvent::HeartbeatInterval(s) => self.heartbeat_interval_s = Some(s),
        }
    }

    fn stopped(&mut self, step: Option<PipelineStep>, cause: Option<StopCause>) {
        self.state = RecordState::Stopped { cause };
        if let Some(step) = step {
            self.set_step(step, StepState::Pending);
        }
    }
}

#[cfg(test)]
mod tests;
