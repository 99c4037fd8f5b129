//! The pipeline's public face: the handle everyone else holds, the commands it
//! sends the actor, and the replies and errors of a start.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use lavender::config::PipelineStep;
use lavender::heartbeat::WorkerState;
use lavender::status::PipelineState;
use lavender_api::{StartRequest, StopReport};
use tokio::sync::{broadcast, oneshot, watch};

use super::reload::Reload;
use crate::process::WorkerHandle;
use lavender::pipeline_file::{PipelineRecord, StopCause};
// The actor answers a start with the API's reply.
pub(crate) use lavender_api::StartReply;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StartError {
    #[error("the pipeline is {}{}; stop it first (lavenderd stop)", busy(*state), pid.map(|p| format!(" (worker pid {p})")).unwrap_or_default())]
    AlreadyRunning {
        state: PipelineState,
        pid: Option<u32>,
    },
    /// A start without `--resume` while an unfinished run could be resumed.
    #[error("{message}")]
    Resumable {
        message: String,
        run_dir: PathBuf,
        resume_command: String,
        fresh_command: String,
    },
    /// A start naming a config other than the one the running pipeline started with.
    #[error("{0}")]
    ConfigDiffers(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Spawn(String),
}

fn busy(state: PipelineState) -> &'static str {
    match state {
        PipelineState::Crashed => "waiting to restart after a crash",
        PipelineState::WaitingForDisk => "waiting for disk space to resume",
        PipelineState::Stopping => "stopping",
        _ => "already running",
    }
}

pub(super) enum Command {
    Start {
        req: StartRequest,
        reply: oneshot::Sender<Result<StartReply, StartError>>,
    },
    Stop {
        timeout: Option<Duration>,
        cause: StopCause,
        reply: oneshot::Sender<StopReport>,
    },
    /// The watchdog found the worker hung (`supervisor.on_stall: restart`).
    Hung(HungReport),
    ResumeMismatch(ResumeMismatch),
    /// The watchdog learned a longer steady heartbeat interval for the run
    /// (`supervisor.stale_after_s: auto`); the record keeps it.
    Interval {
        run_dir: PathBuf,
        longest_s: f64,
    },
    /// The watchdog found the next save short of space (`actor/disk_wait.rs`).
    DiskShort,
    /// Read the config file again (SIGHUP, `lavenderd reload`).
    Reload {
        reply: oneshot::Sender<Result<Reload, String>>,
    },
    /// Delete old runs (`lavenderd prune`): never the run being started or run.
    Prune {
        req: lavender_api::PruneRequest,
        reply: oneshot::Sender<Result<lavender_api::PruneReply, String>>,
    },
    /// A round trip that proves the actor's loop still turns (the service watchdog).
    Ping {
        reply: oneshot::Sender<()>,
    },
    /// The daemon is about to re-execute itself: the record on disk is current; the
    /// actor ends without touching the worker (the next daemon re-adopts it).
    Detach {
        reply: oneshot::Sender<()>,
    },
}

/// A worker that has not written a heartbeat within its phase's allowance.
/// A resumed worker's replayed step that differs (the replay watcher's, `crate::replay`).
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeMismatch {
    /// The run's directory and the checkpoint resumed from (its name).
    pub run_dir: PathBuf,
    pub checkpoint: String,
    pub mismatch: lavender::replay::Mismatch,
    pub tolerance: lavender::replay::Tolerance,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HungReport {
    /// The worker seen hung: the actor acts only if it is still the one running.
    pub worker: WorkerHandle,
    /// The phase its last heartbeat named (`starting`: none yet).
    pub phase: WorkerState,
    /// The training step of its last heartbeat, if it wrote one.
    pub step: Option<u64>,
    /// How long it has been silent in that phase.
    pub stalled_for: Duration,
    /// What that phase allows, and the key that sets it.
    pub allowance: Duration,
    pub allowance_key: &'static str,
    /// The pipeline step the worker runs (a data step has no phases or steps).
    pub work: PipelineStep,
}

/// How a handle reaches the actor's input channel: the actor makes it (the channel's
/// item, `actor::Input`, stays the actor's own).
pub(super) type CommandSender = std::sync::Arc<dyn Fn(Command) -> Option<()> + Send + Sync>;

/// The handle everyone else holds.
#[derive(Clone)]
pub struct PipelineHandle {
    /// Puts a command on the actor's one input channel (`actor::Input`), `None` once
    /// the actor has ended; the handles hold the channel open.
    pub(super) inputs: CommandSender,
    pub(super) snapshot: watch::Receiver<PipelineRecord>,
    pub(super) transitions: broadcast::Sender<PipelineRecord>,
}

impl PipelineHandle {
    /// Hands the actor `cmd` (never waits); `None` once the actor has ended.
    fn send(&self, cmd: Command) -> Option<()> {
        (self.inputs)(cmd)
    }

    pub async fn start(&self, req: StartRequest) -> Result<StartReply, StartError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Start { req, reply })
            .ok_or_else(|| StartError::Spawn("the pipeline actor has stopped".into()))?;
        rx.await
            .map_err(|_| StartError::Spawn("the pipeline actor has stopped".into()))?
    }

    /// Stops the pipeline gracefully (an operator's stop: it stays stopped);
    /// resolves once the worker has exited.
    pub async fn stop(&self, timeout: Option<Duration>) -> Result<StopReport> {
        self.stop_for(StopCause::Operator, timeout).await
    }

    /// [`PipelineHandle::stop`] for `cause`: the daemon exiting stops the pipeline
    /// as [`StopCause::DaemonExit`], which its next start resumes.
    pub async fn stop_for(
        &self,
        cause: StopCause,
        timeout: Option<Duration>,
    ) -> Result<StopReport> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Stop {
            timeout,
            cause,
            reply,
        })
        .context("the pipeline actor has stopped")?;
        rx.await.ok().context("the pipeline actor has stopped")
    }

    /// Hands the actor a hung worker (it kills and restarts it). Never waits.
    pub fn report_hung(&self, report: HungReport) -> bool {
        self.send(Command::Hung(report)).is_some()
    }

    /// Hands the actor a replayed step that differs (never waits).
    pub fn report_resume_mismatch(&self, report: ResumeMismatch) -> bool {
        self.send(Command::ResumeMismatch(report)).is_some()
    }

    /// Tells the actor the next save looks short of space: it checks the disk and
    /// applies retention early (never waits).
    pub fn report_disk_short(&self) -> bool {
        self.send(Command::DiskShort).is_some()
    }

    /// Hands the actor the run's longest steady heartbeat interval (never waits).
    pub fn report_interval(&self, run_dir: PathBuf, longest_s: f64) -> bool {
        self.send(Command::Interval { run_dir, longest_s })
            .is_some()
    }

    /// Has the actor read its config file again; the report says what changed and
    /// when each change takes effect, and carries the new config for the daemon's
    /// other parts.
    pub async fn reload(&self) -> Result<Reload, String> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Reload { reply })
            .ok_or_else(|| "the pipeline actor has stopped".to_string())?;
        rx.await
            .map_err(|_| "the pipeline actor has stopped".to_string())?
    }

    /// Plans a prune of old runs, or deletes the runs of its plan that `req` names;
    /// a start waits meanwhile, so the run it makes or resumes from is not deleted.
    pub async fn prune(
        &self,
        req: lavender_api::PruneRequest,
    ) -> Result<lavender_api::PruneReply, String> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Prune { req, reply })
            .ok_or_else(|| "the pipeline actor has stopped".to_string())?;
        rx.await
            .map_err(|_| "the pipeline actor has stopped".to_string())?
    }

    /// True when the actor answered: its loop is not wedged.
    pub async fn ping(&self) -> bool {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Ping { reply }).is_some() && rx.await.is_ok()
    }

    /// Ends the actor between two transitions, leaving the worker running and
    /// `pipeline.json` current, for a daemon that restarts alone.
    pub async fn detach(&self) {
        let (reply, rx) = oneshot::channel();
        if self.send(Command::Detach { reply }).is_some() {
            let _ = rx.await;
        }
    }

    pub fn record(&self) -> PipelineRecord {
        self.snapshot.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<PipelineRecord> {
        self.snapshot.clone()
    }

    /// Every record committed from now on, in order, however quickly the next one
    /// follows (a crash restart's `crashed` lasts as long as a process spawn);
    /// [`PipelineHandle::subscribe`] shows only the latest.
    pub fn subscribe_transitions(&self) -> broadcast::Receiver<PipelineRecord> {
        self.transitions.subscribe()
    }
}
