//! The pipeline actor: one task owns the state machine and the worker; everything
//! else talks to it through the [`PipelineHandle`]'s commands and watches its
//! published record. A file per transition: `start` (and the steps that follow),
//! `exit`, `stop`, `recover` (after a daemon restart).
//!
//! The actor never blocks: what may take seconds (`sbatch`, `scontrol`, `scancel`,
//! deleting old runs) runs on the blocking pool, and a launch reports back with a
//! [`LaunchDone`], so a status, a stop or the watchdog's ping is answered meanwhile.

mod exit;
mod recover;
mod start;
mod stop;
#[cfg(test)]
mod tests;

use anyhow::Result;
use chrono::{DateTime, Utc};
use lavender::config::{Config, PipelineStep};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::handle::{Command, PipelineHandle, StartError, StartReply};
use super::record::{PipelineRecord, WorkerRecord};
use super::restart::Timings;
use super::stop::{StopMark, StopReport};
use crate::alert::{Alert, AlertSender};
use crate::exit::ExitOutcome;
use crate::layout::Layout;
use crate::process::{Backend, JobUpdate, Launched, WorkerHandle};

struct LiveWorker {
    generation: u64,
    handle: WorkerHandle,
    step: PipelineStep,
    started: Instant,
    started_at: Option<DateTime<Utc>>,
    /// Spawned by this daemon (not re-adopted): its exit is reaped by us.
    own_child: bool,
}

struct WorkerExit {
    generation: u64,
    outcome: ExitOutcome,
}

/// A Slurm job of worker `generation` changed state or node.
struct JobChange {
    generation: u64,
    update: JobUpdate,
}

/// The step being launched off the actor (see [`Actor::spawn_step`]).
struct Launching {
    generation: u64,
    step: PipelineStep,
    after_crash: bool,
}

/// How a launch went, reported back to the actor.
struct LaunchDone {
    generation: u64,
    result: Result<Launched>,
}

/// A start whose reply waits for its first step's launch.
struct PendingStart {
    reply: oneshot::Sender<Result<StartReply, StartError>>,
    chunk: u32,
    scale: String,
    notices: Vec<String>,
}

struct Stopping {
    deadline: Instant,
    killed: bool,
    waiters: Vec<oneshot::Sender<StopReport>>,
    mark: StopMark,
    step: PipelineStep,
}

struct Actor {
    layout: Layout,
    config: Config,
    timings: Timings,
    record: PipelineRecord,
    snapshot: watch::Sender<PipelineRecord>,
    exits_tx: mpsc::UnboundedSender<WorkerExit>,
    jobs_tx: mpsc::UnboundedSender<JobChange>,
    launches_tx: mpsc::UnboundedSender<LaunchDone>,
    backend: Backend,
    worker: Option<LiveWorker>,
    generation: u64,
    restart_at: Option<Instant>,
    /// How the worker whose restart is pending ended: the "failed" alert tells it
    /// when that restart cannot be started.
    last_exit: Option<ExitOutcome>,
    stopping: Option<Stopping>,
    /// The launch whose worker the pipeline waits for; a stop abandons it.
    launching: Option<Launching>,
    /// Launches not reported back yet, abandoned ones included.
    launches_in_flight: usize,
    pending_start: Option<PendingStart>,
    /// A detach waits for the launches in flight: the record must name the worker
    /// it leaves running, and an abandoned launch's worker must be cancelled.
    detaching: Option<oneshot::Sender<()>>,
    alerts: AlertSender,
}

/// Loads `state/pipeline.json`, re-adopts a worker that outlived the previous
/// daemon, and starts the actor task.
pub fn spawn(layout: Layout, config: Config, alerts: AlertSender) -> Result<PipelineHandle> {
    let backend = backend_for(&layout, &config);
    spawn_with(layout, config, alerts, backend)
}

/// [`spawn`] with the launch backend given (unit tests pass a fake one).
fn spawn_with(
    layout: Layout,
    config: Config,
    alerts: AlertSender,
    backend: Backend,
) -> Result<PipelineHandle> {
    let record = PipelineRecord::load(&layout)?;
    let (snapshot, snapshot_rx) = watch::channel(record.clone());
    let (cmds, cmds_rx) = mpsc::channel(32);
    let (exits_tx, exits_rx) = mpsc::unbounded_channel();
    let (jobs_tx, jobs_rx) = mpsc::unbounded_channel();
    let (launches_tx, launches_rx) = mpsc::unbounded_channel();
    let mut actor = Actor {
        timings: Timings::from_config(&config.supervisor),
        backend,
        jobs_tx,
        launches_tx,
        layout,
        config,
        record,
        snapshot,
        exits_tx,
        worker: None,
        generation: 0,
        restart_at: None,
        last_exit: None,
        stopping: None,
        launching: None,
        launches_in_flight: 0,
        pending_start: None,
        detaching: None,
        alerts,
    };
    actor.recover();
    tokio::spawn(actor.run(cmds_rx, exits_rx, jobs_rx, launches_rx));
    Ok(PipelineHandle {
        cmds,
        snapshot: snapshot_rx,
    })
}

fn backend_for(layout: &Layout, config: &Config) -> Backend {
    Backend::from_config(&config.launch, layout.state_dir.join("slurm"))
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Actor {
    async fn run(
        mut self,
        mut cmds: mpsc::Receiver<Command>,
        mut exits: mpsc::UnboundedReceiver<WorkerExit>,
        mut jobs: mpsc::UnboundedReceiver<JobChange>,
        mut launches: mpsc::UnboundedReceiver<LaunchDone>,
    ) {
        loop {
            let kill_at = self
                .stopping
                .as_ref()
                .filter(|s| !s.killed)
                .map(|s| s.deadline);
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    Some(Command::Detach { reply }) => self.detaching = Some(reply),
                    Some(cmd) => self.on_command(cmd),
                    None => break,
                },
                Some(done) = launches.recv() => self.on_launched(done),
                Some(exit) = exits.recv() => self.on_exit(exit),
                Some(change) = jobs.recv() => self.on_job_change(change),
                _ = sleep_until_opt(self.restart_at) => self.on_restart_due(),
                _ = sleep_until_opt(kill_at) => self.escalate(),
            }
            if self.launches_in_flight == 0
                && let Some(reply) = self.detaching.take()
            {
                tracing::info!("pipeline actor detached; the worker is left running");
                let _ = reply.send(());
                break;
            }
        }
    }

    /// Persists and publishes the record; a failed write is logged, not fatal
    /// (the worker must keep being supervised even on a full disk).
    fn commit(&mut self) {
        if let Err(e) = self.record.save(&self.layout) {
            tracing::error!("{e:#}");
        }
        self.snapshot.send_replace(self.record.clone());
    }

    fn alert(&self, alert: Alert) {
        let _ = self.alerts.send(alert);
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Start { req, reply } => self.start(req, reply),
            Command::Stop { timeout, reply } => self.stop(timeout, reply),
            Command::Reload { config } => {
                self.timings = Timings::from_config(&config.supervisor);
                self.backend = backend_for(&self.layout, &config);
                self.config = *config;
                tracing::info!("config reloaded; it applies to the next worker started");
            }
            Command::Ping { reply } | Command::Detach { reply } => {
                let _ = reply.send(());
            }
        }
    }

    /// A re-adopted worker is not our child: poll it (kill(pid, 0) + start time, or
    /// the Slurm job's state).
    fn watch_adopted(&self, generation: u64, handle: WorkerHandle) {
        let exits = self.exits_tx.clone();
        let jobs = self.jobs_tx.clone();
        let exit = self.backend.watch_adopted(
            &handle,
            self.timings.poll_interval,
            Box::new(move |update| {
                let _ = jobs.send(JobChange { generation, update });
            }),
        );
        tokio::spawn(async move {
            let outcome = exit.await;
            let _ = exits.send(WorkerExit {
                generation,
                outcome,
            });
        });
    }

    /// A Slurm job moved (pending → running on a node → requeued …): the status shows it.
    fn on_job_change(&mut self, change: JobChange) {
        if self.worker.as_ref().map(|w| w.generation) != Some(change.generation) {
            return;
        }
        let Some(WorkerRecord {
            handle: WorkerHandle::Slurm { slurm },
            ..
        }) = self.record.worker.as_mut()
        else {
            return;
        };
        slurm.state = Some(change.update.state);
        slurm.reason = change.update.reason;
        if change.update.node.is_some() {
            slurm.node = change.update.node;
        }
        if let Some(w) = self.worker.as_mut() {
            w.handle = WorkerHandle::Slurm {
                slurm: slurm.clone(),
            };
        }
        self.commit();
    }
}
