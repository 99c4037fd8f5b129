//! The pipeline actor: one task owns the state machine and the worker; everything
//! else talks to it through commands on a channel and watches its published record.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use lavender::config::{Config, PipelineStep};
use lavender::status::{PipelineState, StepState};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::alert::{Alert, AlertSender};
use super::judge::{Verdict, judge};
use super::record::{PipelineRecord, WorkerRecord};
use super::request::StartRequest;
use super::restart::Timings;
use super::stop::{StopMark, StopReport};
use super::{markers, plan};
use crate::layout::Layout;
use crate::process::{Backend, ExitOutcome, JobUpdate, WorkerHandle};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartReply {
    pub state: PipelineState,
    pub chunk: u32,
    pub scale: String,
    pub active_step: Option<PipelineStep>,
    pub pid: Option<u32>,
    pub run_dir: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    pub resume_from: Option<PathBuf>,
    /// The Slurm job of the first step (launch.backend: slurm).
    #[serde(default)]
    pub slurm_job: Option<String>,
    /// Lines to show the operator, e.g. that the built shards are fewer than the
    /// scale asks for.
    #[serde(default)]
    pub notices: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StartError {
    #[error("the pipeline is {}{}; stop it first (lavenderd stop)", busy(*state), pid.map(|p| format!(" (worker pid {p})")).unwrap_or_default())]
    AlreadyRunning {
        state: PipelineState,
        pid: Option<u32>,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Spawn(String),
}

fn busy(state: PipelineState) -> &'static str {
    match state {
        PipelineState::Crashed => "waiting to restart after a crash",
        PipelineState::Stopping => "stopping",
        _ => "already running",
    }
}

enum Command {
    Start {
        req: StartRequest,
        reply: oneshot::Sender<Result<StartReply, StartError>>,
    },
    Stop {
        timeout: Option<Duration>,
        reply: oneshot::Sender<StopReport>,
    },
    Reload {
        config: Box<Config>,
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

/// The handle everyone else holds.
#[derive(Clone)]
pub struct PipelineHandle {
    cmds: mpsc::Sender<Command>,
    snapshot: watch::Receiver<PipelineRecord>,
}

impl PipelineHandle {
    pub async fn start(&self, req: StartRequest) -> Result<StartReply, StartError> {
        let (reply, rx) = oneshot::channel();
        self.cmds
            .send(Command::Start { req, reply })
            .await
            .map_err(|_| StartError::Spawn("the pipeline actor has stopped".into()))?;
        rx.await
            .map_err(|_| StartError::Spawn("the pipeline actor has stopped".into()))?
    }

    /// Stops the pipeline gracefully; resolves once the worker has exited.
    pub async fn stop(&self, timeout: Option<Duration>) -> Result<StopReport> {
        let (reply, rx) = oneshot::channel();
        self.cmds
            .send(Command::Stop { timeout, reply })
            .await
            .ok()
            .context("the pipeline actor has stopped")?;
        rx.await.ok().context("the pipeline actor has stopped")
    }

    pub async fn reload(&self, config: Config) {
        let _ = self
            .cmds
            .send(Command::Reload {
                config: Box::new(config),
            })
            .await;
    }

    /// True when the actor answered: its loop is not wedged.
    pub async fn ping(&self) -> bool {
        let (reply, rx) = oneshot::channel();
        self.cmds.send(Command::Ping { reply }).await.is_ok() && rx.await.is_ok()
    }

    /// Ends the actor between two transitions, leaving the worker running and
    /// `pipeline.json` current, for a daemon that restarts alone.
    pub async fn detach(&self) {
        let (reply, rx) = oneshot::channel();
        if self.cmds.send(Command::Detach { reply }).await.is_ok() {
            let _ = rx.await;
        }
    }

    pub fn record(&self) -> PipelineRecord {
        self.snapshot.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<PipelineRecord> {
        self.snapshot.clone()
    }
}

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
    backend: Backend,
    worker: Option<LiveWorker>,
    generation: u64,
    restart_at: Option<Instant>,
    /// How the worker whose restart is pending ended: the "failed" alert tells it
    /// when that restart cannot be started.
    last_exit: Option<ExitOutcome>,
    stopping: Option<Stopping>,
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
    let mut actor = Actor {
        timings: Timings::from_config(&config.supervisor),
        backend,
        jobs_tx,
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
        alerts,
    };
    actor.recover();
    tokio::spawn(actor.run(cmds_rx, exits_rx, jobs_rx));
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

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

impl Actor {
    async fn run(
        mut self,
        mut cmds: mpsc::Receiver<Command>,
        mut exits: mpsc::UnboundedReceiver<WorkerExit>,
        mut jobs: mpsc::UnboundedReceiver<JobChange>,
    ) {
        loop {
            let kill_at = self
                .stopping
                .as_ref()
                .filter(|s| !s.killed)
                .map(|s| s.deadline);
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    Some(Command::Detach { reply }) => {
                        tracing::info!("pipeline actor detached; the worker is left running");
                        let _ = reply.send(());
                        break;
                    }
                    Some(cmd) => self.on_command(cmd),
                    None => break,
                },
                Some(exit) = exits.recv() => self.on_exit(exit),
                Some(change) = jobs.recv() => self.on_job_change(change),
                _ = sleep_until_opt(self.restart_at) => self.on_restart_due(),
                _ = sleep_until_opt(kill_at) => self.escalate(),
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

    /// After a daemon restart: adopt a live worker, or account for one that ended
    /// while no daemon was watching, or resume a pending restart.
    fn recover(&mut self) {
        if let Some(w) = self.record.worker.clone() {
            if w.handle.is_alive() {
                let elapsed = parse_time(&w.started_at)
                    .map(|t| (Utc::now() - t).to_std().unwrap_or_default())
                    .unwrap_or_default();
                let started = Instant::now()
                    .checked_sub(elapsed)
                    .unwrap_or_else(Instant::now);
                self.generation += 1;
                self.worker = Some(LiveWorker {
                    generation: self.generation,
                    handle: w.handle.clone(),
                    step: w.step,
                    started,
                    started_at: parse_time(&w.started_at),
                    own_child: false,
                });
                self.watch_adopted(self.generation, w.handle.clone());
                if self.record.state == PipelineState::Stopping {
                    // The stop was under way when the previous daemon died: finish it.
                    self.stopping = Some(Stopping {
                        deadline: Instant::now() + self.timings.stop_timeout,
                        killed: false,
                        waiters: Vec::new(),
                        mark: StopMark::take(
                            self.record.run_dir.as_deref(),
                            &self.layout.checkpoints_root(),
                        ),
                        step: w.step,
                    });
                } else {
                    self.record.state = PipelineState::Running;
                }
                tracing::info!(worker = %w.handle, step = %w.step, "re-adopted running worker");
                self.alert(Alert::Adopted {
                    step: w.step.to_string(),
                    worker: w.handle.to_string(),
                });
                self.commit();
                return;
            }
            // It ended while no daemon watched: judge it from the files.
            let was_stopping = self.record.state == PipelineState::Stopping;
            self.generation += 1;
            self.worker = Some(LiveWorker {
                generation: self.generation,
                started_at: parse_time(&w.started_at),
                handle: w.handle,
                step: w.step,
                started: Instant::now(),
                own_child: false,
            });
            if was_stopping {
                self.stopping = Some(Stopping {
                    deadline: Instant::now(),
                    killed: false,
                    waiters: Vec::new(),
                    mark: StopMark {
                        run_dir: self.record.run_dir.clone(),
                        events_offset: 0,
                        newest_before: None,
                    },
                    step: w.step,
                });
            }
            self.on_exit(WorkerExit {
                generation: self.generation,
                outcome: ExitOutcome::Unknown,
            });
            return;
        }
        if self.record.restart_pending {
            self.restart_at =
                Some(Instant::now() + self.timings.backoff.before(self.record.restarts));
        } else if self.record.state == PipelineState::Running {
            // The daemon died between two steps.
            self.advance();
        } else if self.record.state == PipelineState::Stopping {
            self.record.state = PipelineState::Stopped;
            self.commit();
        }
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Start { req, reply } => {
                let result = self.start(req);
                let _ = reply.send(result);
            }
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

    fn start(&mut self, req: StartRequest) -> Result<StartReply, StartError> {
        if self.record.is_active() {
            return Err(StartError::AlreadyRunning {
                state: self.record.state,
                pid: self.worker.as_ref().and_then(|w| w.handle.pid()),
            });
        }
        req.validate().map_err(StartError::Invalid)?;
        if let Some(root) = &req.data_root
            && !same_path(root, &self.layout.data_root)
        {
            return Err(StartError::Invalid(format!(
                "this daemon serves data root {}, not {}; start a daemon for that data root (lavenderd --data-root {} serve)",
                self.layout.data_root.display(),
                root.display(),
                root.display()
            )));
        }
        let chunk = req.chunk.unwrap_or(self.config.chunk);
        let scale = req.scale.unwrap_or(self.config.scale);
        let steps = plan::steps(&self.layout, &self.config, chunk, req.skip_train);
        let trains = steps
            .iter()
            .any(|s| s.name == PipelineStep::Train && s.state == StepState::Pending);
        let resume_from = if trains {
            plan::resolve_resume(&self.layout, &req, chunk)?
        } else {
            None
        };

        let mut worker_config = self.config.clone();
        worker_config.scale = scale;
        worker_config.chunk = chunk;
        let cfg_path = self.layout.worker_config();
        lavender::atomic::write_file(&cfg_path, worker_config.to_yaml().as_bytes())
            .map_err(|e| StartError::Spawn(e.to_string()))?;
        // Shards already built (build_shards/precompute manifests) that are fewer than
        // the scale asks for are worth a line before the run starts.
        let notices: Vec<String> = lavender::manifest::data_counts(&self.layout.data_root)
            .get("shards_available")
            .copied()
            .flatten()
            .and_then(|available| worker_config.shard_shortfall(available))
            .map(|short| short.to_string())
            .into_iter()
            .collect();

        let now = lavender::time::now_utc();
        let any_pending = steps.iter().any(|s| s.state == StepState::Pending);
        let run_dir = if any_pending {
            let root = self.layout.checkpoints_root();
            std::fs::create_dir_all(&root)
                .map_err(|e| StartError::Spawn(format!("create {}: {e}", root.display())))?;
            Some(
                lavender::run::create_run(&root, now)
                    .map_err(|e| StartError::Spawn(e.to_string()))?
                    .path,
            )
        } else {
            None
        };
        let log_file = self.layout.logs_dir().join(format!(
            "pipeline_chunk{chunk}_{}.log",
            now.format("%Y%m%d_%H%M%S")
        ));
        self.record = PipelineRecord {
            state: PipelineState::Running,
            request: Some(req),
            chunk: Some(chunk),
            scale: Some(scale.to_string()),
            steps,
            active_step: None,
            run_dir,
            log_file: Some(log_file),
            worker: None,
            restarts: 0,
            resume_from,
            restart_pending: false,
            last_error: None,
            updated_at: String::new(),
        };
        self.advance();
        if self.record.state == PipelineState::Failed {
            return Err(StartError::Spawn(
                self.record
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "the first step could not be started".into()),
            ));
        }
        Ok(StartReply {
            state: self.record.state,
            chunk,
            scale: scale.to_string(),
            active_step: self.record.active_step,
            pid: self.worker.as_ref().and_then(|w| w.handle.pid()),
            run_dir: self.record.run_dir.clone(),
            log_file: self.record.log_file.clone(),
            resume_from: self.record.resume_from.clone(),
            slurm_job: self
                .worker
                .as_ref()
                .and_then(|w| w.handle.slurm_job())
                .map(|j| j.job_id.clone()),
            notices,
        })
    }

    /// Starts the next pending step, or finishes the pipeline.
    fn advance(&mut self) {
        let next = self
            .record
            .steps
            .iter()
            .find(|s| s.state == StepState::Pending || s.state == StepState::Running)
            .map(|s| s.name);
        match next {
            None => {
                self.record.state = PipelineState::Finished;
                self.record.active_step = None;
                self.record.worker = None;
                tracing::info!("pipeline finished");
                self.commit();
                self.alert(self.finished_alert());
                self.prune_old_runs();
            }
            Some(step) => {
                if let Err(e) = self.spawn_step(step, false) {
                    self.fail(step, format!("{e:#}"));
                }
            }
        }
    }

    /// The run's summary for the "finished" push: time since the run directory was
    /// created, the last heartbeat's loss, the latest complete checkpoint.
    fn finished_alert(&self) -> Alert {
        let run_dir = self.record.run_dir.as_deref();
        let duration = run_dir
            .and_then(|d| d.file_name())
            .and_then(|n| lavender::run::parse_run_name(&n.to_string_lossy()).ok())
            .and_then(|t| (lavender::time::now_utc().naive_utc() - t).to_std().ok())
            .unwrap_or_default();
        let final_loss = run_dir
            .and_then(|d| lavender::heartbeat::read(&lavender::heartbeat::path(d)).ok())
            .and_then(|hb| hb.loss_smooth.or(hb.loss));
        let final_checkpoint = run_dir
            .and_then(|d| lavender::checkpoint::latest_complete(d).ok().flatten())
            .map(|c| c.name);
        Alert::Finished {
            duration,
            final_loss,
            final_checkpoint,
        }
    }

    /// `supervisor.keep_runs`: once a pipeline has finished (so its own run holds the
    /// checkpoints it needs, not the run it resumed from), drop the oldest runs.
    fn prune_old_runs(&self) {
        let Some(keep) = self.config.supervisor.keep_runs else {
            return;
        };
        let root = self.layout.checkpoints_root();
        match lavender::checkpoint::prune_runs(&root, keep as usize, self.record.run_dir.as_deref())
        {
            Ok(report) if !report.removed.is_empty() => tracing::info!(
                "keep_runs {keep}: removed {} old run(s), freed {} bytes",
                report.removed.len(),
                report.bytes_freed
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("keep_runs {keep}: {e}"),
        }
    }

    fn spawn_step(&mut self, step: PipelineStep, after_crash: bool) -> Result<()> {
        let resume = if step != PipelineStep::Train {
            None
        } else if after_crash {
            plan::crash_resume(&self.record)
        } else {
            self.record.resume_from.clone()
        };
        let spec = plan::spawn_spec(&self.layout, &self.config, &self.record, step, resume);
        self.generation += 1;
        let generation = self.generation;
        let jobs = self.jobs_tx.clone();
        let launched = self.backend.launch(
            &spec,
            Box::new(move |update| {
                let _ = jobs.send(JobChange { generation, update });
            }),
        )?;
        tracing::info!(%step, worker = %launched.handle, after_crash, "worker started");
        let started_at = lavender::time::now_utc();
        self.record.worker = Some(WorkerRecord {
            handle: launched.handle.clone(),
            step,
            started_at: lavender::time::rfc3339_z(started_at),
        });
        self.worker = Some(LiveWorker {
            generation,
            handle: launched.handle,
            step,
            started: Instant::now(),
            started_at: Some(started_at),
            own_child: true,
        });
        self.record.state = PipelineState::Running;
        self.record.active_step = Some(step);
        self.record.restart_pending = false;
        self.last_exit = None;
        self.record.set_step(step, StepState::Running);
        self.commit();
        let exits = self.exits_tx.clone();
        let exit = launched.exit;
        tokio::spawn(async move {
            let outcome = exit.await;
            let _ = exits.send(WorkerExit {
                generation,
                outcome,
            });
        });
        Ok(())
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

    fn on_exit(&mut self, exit: WorkerExit) {
        let Some(worker) = self.worker.take_if(|w| w.generation == exit.generation) else {
            return;
        };
        self.record.worker = None;
        let step = worker.step;
        tracing::info!(step = %step, outcome = %exit.outcome, "worker exited");

        if let Some(stopping) = self.stopping.take() {
            let report = StopReport::after_exit(
                stopping.step,
                &stopping.mark,
                &self.layout.checkpoints_root(),
                stopping.killed,
            );
            tracing::info!("{}", report.message);
            self.record.state = PipelineState::Stopped;
            self.record.set_step(step, StepState::Pending);
            self.commit();
            for waiter in stopping.waiters {
                let _ = waiter.send(report.clone());
            }
            return;
        }

        match judge(
            step,
            exit.outcome,
            self.record.run_dir.as_deref(),
            &self.layout.data_root,
            worker.started_at,
        ) {
            Verdict::Success => {
                let chunk = self.record.chunk.unwrap_or(self.config.chunk);
                if let Err(e) =
                    markers::write(&self.layout, chunk, step, self.record.run_dir.as_deref())
                {
                    tracing::error!("{e:#}");
                }
                self.record.set_step(step, StepState::Done);
                self.record.active_step = None;
                self.advance();
            }
            Verdict::StoppedExternally => {
                self.record.state = PipelineState::Stopped;
                self.record.set_step(step, StepState::Pending);
                self.commit();
                self.alert(Alert::StoppedExternally {
                    step: step.to_string(),
                });
            }
            Verdict::Crash(reason) => self.crashed(step, exit.outcome, reason, worker.started),
        }
    }

    fn crashed(&mut self, step: PipelineStep, outcome: ExitOutcome, reason: String, started: Instant) {
        if started.elapsed() >= self.timings.reset_after {
            // It made progress for long enough: this crash starts a fresh count.
            self.record.restarts = 0;
        }
        if self.record.restarts >= self.timings.max_restarts {
            self.fail_after(
                step,
                format!(
                    "{reason}; gave up after {} restart(s) (supervisor.max_restarts)",
                    self.record.restarts
                ),
                Some(outcome),
            );
            return;
        }
        self.record.restarts += 1;
        let delay = self.timings.backoff.before(self.record.restarts);
        self.record.state = PipelineState::Crashed;
        self.record.restart_pending = true;
        self.record.last_error = Some(reason);
        self.restart_at = Some(Instant::now() + delay);
        self.last_exit = Some(outcome);
        self.commit();
        self.alert(Alert::Crashed {
            step: step.to_string(),
            outcome,
            restart: self.record.restarts,
            max_restarts: self.timings.max_restarts,
            restart_in: delay,
            log_file: self.record.log_file.clone(),
        });
    }

    fn on_restart_due(&mut self) {
        self.restart_at = None;
        let Some(step) = self.record.active_step else {
            return;
        };
        if let Err(e) = self.spawn_step(step, true) {
            let last_exit = self.last_exit.take();
            self.fail_after(step, format!("{e:#}"), last_exit);
        }
    }

    fn fail(&mut self, step: PipelineStep, reason: String) {
        self.fail_after(step, reason, None);
    }

    fn fail_after(&mut self, step: PipelineStep, reason: String, last_exit: Option<ExitOutcome>) {
        tracing::error!(%step, "{reason}");
        self.record.state = PipelineState::Failed;
        self.record.set_step(step, StepState::Failed);
        self.record.restart_pending = false;
        self.record.worker = None;
        self.record.last_error = Some(reason.clone());
        self.restart_at = None;
        self.last_exit = None;
        self.commit();
        self.alert(Alert::Failed {
            step: step.to_string(),
            reason,
            restarts: self.record.restarts,
            last_exit,
        });
    }

    fn stop(&mut self, timeout: Option<Duration>, reply: oneshot::Sender<StopReport>) {
        if let Some(stopping) = &mut self.stopping {
            stopping.waiters.push(reply);
            return;
        }
        let root = self.layout.checkpoints_root();
        let Some(worker) = &self.worker else {
            let mut report = StopReport::nothing_running(&root, self.record.run_dir.as_deref());
            if self.record.restart_pending {
                // Crashed and waiting to restart: cancelling the restart is the stop.
                self.restart_at = None;
                self.last_exit = None;
                self.record.restart_pending = false;
                self.record.state = PipelineState::Stopped;
                if let Some(step) = self.record.active_step {
                    self.record.set_step(step, StepState::Pending);
                }
                self.commit();
                report.message = format!("cancelled the pending restart; {}", report.message);
            }
            let _ = reply.send(report);
            return;
        };
        let mark = StopMark::take(self.record.run_dir.as_deref(), &root);
        let timeout = timeout.unwrap_or(self.timings.stop_timeout);
        tracing::info!(worker = %worker.handle, step = %worker.step, ?timeout, "stopping: SIGTERM to the worker");
        self.backend
            .signal(&worker.handle, Signal::SIGTERM, worker.own_child);
        self.stopping = Some(Stopping {
            deadline: Instant::now() + timeout,
            killed: false,
            waiters: vec![reply],
            mark,
            step: worker.step,
        });
        self.record.state = PipelineState::Stopping;
        self.commit();
    }

    /// The stop timeout passed: SIGKILL the group.
    fn escalate(&mut self) {
        let (Some(stopping), Some(worker)) = (&mut self.stopping, &self.worker) else {
            return;
        };
        tracing::warn!(
            worker = %worker.handle,
            "the worker did not exit within the stop timeout; SIGKILL"
        );
        self.backend
            .signal(&worker.handle, Signal::SIGKILL, worker.own_child);
        stopping.killed = true;
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => plan::absolute(a) == plan::absolute(b),
    }
}

#[cfg(test)]
mod tests {
    //! The state machine against workers that are not processes, on a paused
    //! clock: every wait is exact, nothing depends on this machine's speed.

    use lavender::config::SupervisorConfig;
    use tokio::sync::mpsc::UnboundedReceiver;

    use super::*;
    use crate::process::fake::FakeBackend;

    struct Harness {
        _dir: tempfile::TempDir,
        pipeline: PipelineHandle,
        fake: FakeBackend,
        alerts: UnboundedReceiver<Alert>,
    }

    fn harness(supervisor: impl FnOnce(&mut SupervisorConfig)) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("data"), None);
        layout.ensure_state_dir().unwrap();
        let mut config = Config {
            steps: vec![PipelineStep::Train],
            ..Config::default()
        };
        supervisor(&mut config.supervisor);
        let (tx, alerts) = mpsc::unbounded_channel();
        let fake = FakeBackend::default();
        let pipeline =
            spawn_with(layout, config, tx, Backend::fake(fake.clone())).expect("the actor");
        Harness {
            _dir: dir,
            pipeline,
            fake,
            alerts,
        }
    }

    impl Harness {
        async fn start(&self) {
            self.pipeline
                .start(StartRequest::default())
                .await
                .expect("started");
            assert_eq!(self.fake.launched(), [PipelineStep::Train]);
        }

        async fn wait_state(&self, state: PipelineState) -> PipelineRecord {
            self.pipeline
                .subscribe()
                .wait_for(|r| r.state == state)
                .await
                .expect("the actor runs")
                .clone()
        }

        /// The next alert the actor raised.
        async fn alert(&mut self) -> Alert {
            self.alerts.recv().await.expect("an alert")
        }
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[tokio::test(start_paused = true)]
    async fn a_crash_restarts_after_its_backoff_and_the_next_waits_longer() {
        let mut h = harness(|s| {
            s.restart_backoff_s = vec![10.0, 30.0];
            s.max_restarts = 3;
        });
        h.start().await;
        h.fake.exit(0, ExitOutcome::Code(1));
        let record = h.wait_state(PipelineState::Crashed).await;
        assert!(record.restart_pending);
        assert_eq!(record.restarts, 1);
        match h.alert().await {
            Alert::Crashed {
                outcome,
                restart,
                restart_in,
                ..
            } => assert_eq!(
                (outcome, restart, restart_in),
                (ExitOutcome::Code(1), 1, secs(10.0))
            ),
            other => panic!("{other:?}"),
        }
        tokio::time::sleep(secs(9.9)).await;
        assert_eq!(h.fake.launched().len(), 1, "restarted before the backoff");
        tokio::time::sleep(secs(0.2)).await;
        assert_eq!(h.fake.launched().len(), 2);
        assert_eq!(h.pipeline.record().state, PipelineState::Running);

        h.fake.exit(1, ExitOutcome::Signal(9));
        h.wait_state(PipelineState::Crashed).await;
        assert!(
            matches!(h.alert().await, Alert::Crashed { restart: 2, restart_in, .. } if restart_in == secs(30.0))
        );
        tokio::time::sleep(secs(29.9)).await;
        assert_eq!(h.fake.launched().len(), 2);
        tokio::time::sleep(secs(0.2)).await;
        assert_eq!(h.fake.launched().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn restarts_exhausted_fail_the_pipeline_with_the_last_exit() {
        let mut h = harness(|s| {
            s.restart_backoff_s = vec![1.0];
            s.max_restarts = 1;
        });
        h.start().await;
        h.fake.exit(0, ExitOutcome::Code(3));
        h.wait_state(PipelineState::Crashed).await;
        assert!(matches!(h.alert().await, Alert::Crashed { .. }));
        tokio::time::sleep(secs(1.1)).await;
        h.fake.exit(1, ExitOutcome::Code(4));
        let record = h.wait_state(PipelineState::Failed).await;
        assert!(!record.restart_pending);
        assert!(record.worker.is_none());
        match h.alert().await {
            Alert::Failed {
                restarts,
                last_exit,
                ..
            } => assert_eq!((restarts, last_exit), (1, Some(ExitOutcome::Code(4)))),
            other => panic!("{other:?}"),
        }
        tokio::time::sleep(secs(60.0)).await;
        assert_eq!(h.fake.launched().len(), 2, "no restart after failing");
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_that_cannot_start_fails_with_the_crash_exit() {
        let mut h = harness(|s| {
            s.restart_backoff_s = vec![1.0];
            s.max_restarts = 3;
        });
        h.start().await;
        h.fake.exit(0, ExitOutcome::Signal(9));
        h.wait_state(PipelineState::Crashed).await;
        assert!(matches!(h.alert().await, Alert::Crashed { .. }));
        h.fake.refuse_launches();
        tokio::time::sleep(secs(1.1)).await;
        let record = h.wait_state(PipelineState::Failed).await;
        assert!(!record.restart_pending);
        match h.alert().await {
            Alert::Failed {
                reason,
                restarts,
                last_exit,
                ..
            } => {
                assert_eq!((restarts, last_exit), (1, Some(ExitOutcome::Signal(9))));
                assert!(reason.contains("refused"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_healthy_run_starts_a_fresh_restart_count() {
        let mut h = harness(|s| {
            s.restart_backoff_s = vec![1.0, 50.0];
            s.max_restarts = 1;
            s.restart_reset_after_s = 60;
        });
        h.start().await;
        h.fake.exit(0, ExitOutcome::Code(1));
        h.wait_state(PipelineState::Crashed).await;
        h.alert().await;
        tokio::time::sleep(secs(1.1)).await;
        assert_eq!(h.fake.launched().len(), 2);
        // The restarted worker trains for longer than restart_reset_after_s.
        tokio::time::sleep(secs(61.0)).await;
        h.fake.exit(1, ExitOutcome::Code(1));
        let record = h.wait_state(PipelineState::Crashed).await;
        assert_eq!(record.restarts, 1, "counted afresh, not failed");
        assert!(
            matches!(h.alert().await, Alert::Crashed { restart: 1, restart_in, .. } if restart_in == secs(1.0))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_escalates_to_sigkill_after_the_timeout() {
        let h = harness(|_| {});
        h.fake.ignore_sigterm();
        h.start().await;
        let pipeline = h.pipeline.clone();
        let stop = tokio::spawn(async move { pipeline.stop(Some(secs(5.0))).await });
        h.wait_state(PipelineState::Stopping).await;
        tokio::time::sleep(secs(4.9)).await;
        assert_eq!(h.fake.signals(0), [Signal::SIGTERM]);
        tokio::time::sleep(secs(0.2)).await;
        assert_eq!(h.fake.signals(0), [Signal::SIGTERM, Signal::SIGKILL]);
        let report = stop.await.unwrap().expect("a report");
        assert!(report.killed && report.was_running, "{report:?}");
        assert_eq!(h.pipeline.record().state, PipelineState::Stopped);
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_that_saves_on_sigterm_stops_without_escalation() {
        let h = harness(|_| {});
        h.start().await;
        let report = h.pipeline.stop(Some(secs(5.0))).await.expect("a report");
        assert!(!report.killed, "{report:?}");
        assert_eq!(h.fake.signals(0), [Signal::SIGTERM]);
        let record = h.wait_state(PipelineState::Stopped).await;
        assert!(record.worker.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_during_the_backoff_cancels_the_restart() {
        let mut h = harness(|s| {
            s.restart_backoff_s = vec![10.0];
            s.max_restarts = 3;
        });
        h.start().await;
        h.fake.exit(0, ExitOutcome::Code(1));
        h.wait_state(PipelineState::Crashed).await;
        h.alert().await;
        let report = h.pipeline.stop(None).await.expect("a report");
        assert!(
            report.message.starts_with("cancelled the pending restart"),
            "{report:?}"
        );
        tokio::time::sleep(secs(60.0)).await;
        assert_eq!(h.fake.launched().len(), 1, "restarted after the stop");
        assert_eq!(h.pipeline.record().state, PipelineState::Stopped);
    }
}
