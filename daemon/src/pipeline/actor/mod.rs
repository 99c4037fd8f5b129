//! The pipeline actor: one task owns the state machine (its phase, stepped by
//! `pipeline/machine/`; the effects performed by `effects.rs`) and the worker. It
//! hears everything on one channel, one [`Input`] at a time: the [`PipelineHandle`]'s
//! commands and its own tasks' reports; everything else watches its published
//! record. A file per transition: `start` (and the steps that follow), `exit`,
//! `restart` (a failed or hung worker restarted, or the pipeline failed), `hung` (a
//! worker that stopped beating killed), `stop`, `recover` (after a daemon restart)
//! and `resume` (an interrupted pipeline resumed at daemon start).
//!
//! The actor never blocks: what may take seconds (`sbatch`, `scontrol`, `scancel`,
//! deleting old runs, fingerprinting a source folder's files) runs on the blocking
//! pool, and reports back on the same channel ([`Input::Launched`],
//! [`Input::Fingerprinted`], …), so a status, a stop or the watchdog's ping is
//! answered meanwhile.

mod damaged;
mod decided;
mod disk_wait;
mod effects;
mod evidence;
mod exit;
mod hung;
mod mismatch;
mod prune;
mod recover;
mod reload;
mod restart;
mod resume;
mod rollback;
mod start;
mod stop;
#[cfg(test)]
mod tests;

use anyhow::Result;
use lavender::config::{Config, PipelineStep};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::handle::{Command, PipelineHandle, StartError, StartReply};
use super::machine::{Event, Phase};
use crate::alert::{Alert, AlertSender};
use crate::config_source::ConfigSource;
use crate::exit::ExitOutcome;
use crate::process::{Backend, ExitFuture, JobUpdate, Launched, WorkerHandle};
use lavender::layout::Layout;
use lavender::pipeline_file::{PipelineRecord, WorkerRecord};
use lavender::steps::inputs::{LocalFiles, reads_local_files};

pub(super) struct WorkerExit {
    generation: u64,
    outcome: ExitOutcome,
    /// The local files of its step as they were before it started (read when it ended
    /// for a worker adopted from a previous daemon), for its done-marker.
    files: LocalFiles,
}

/// A Slurm job of worker `generation` changed state or node.
pub(super) struct JobChange {
    generation: u64,
    update: JobUpdate,
}

/// How a launch went, reported back to the actor.
pub(super) struct LaunchDone {
    generation: u64,
    result: Result<Launched>,
    /// What the check of the checkpoint to resume from found (`damaged.rs`).
    checked: Option<damaged::Checked>,
    /// The step's local files fingerprinted just before the launch: a file edited
    /// while the step runs is not taken as one it has read.
    files: LocalFiles,
}

/// A start whose steps' local files were fingerprinted on the blocking pool; the
/// actor goes on with it in [`Actor::on_fingerprinted`].
pub(super) struct Fingerprinted {
    req: lavender::pipeline_file::StartRequest,
    reply: oneshot::Sender<Result<StartReply, StartError>>,
    config: Config,
    origins: Option<lavender::config::ConfigOrigins>,
    files: LocalFiles,
}

/// A prune's work on the blocking pool done; `reply`: who asked (none for
/// `supervisor.keep_runs`).
pub(super) struct Pruned {
    result: Result<lavender_api::PruneReply, String>,
    keep_runs: usize,
    /// It deleted (or tried to), holding starts back meanwhile.
    holds: bool,
    reply: Option<oneshot::Sender<Result<lavender_api::PruneReply, String>>>,
}

/// Committed records a subscriber may fall behind by before it skips to the latest.
const TRANSITIONS: usize = 64;

struct Actor {
    layout: Layout,
    config: Config,
    /// Where `config` was read from; a start and a reload read it again.
    source: ConfigSource,
    record: PipelineRecord,
    /// The record changed since it was last saved and published (`commit`).
    unsaved: bool,
    snapshot: watch::Sender<PipelineRecord>,
    /// Every committed record, in order (the watch keeps only the latest).
    transitions: broadcast::Sender<PipelineRecord>,
    /// Where the actor's own tasks report back: its one input channel.
    reports: Reports,
    /// Prunes deleting runs now, and the starts held back until they are done (a
    /// start makes a run, or resumes from one).
    prunes_in_flight: usize,
    held_starts: Vec<Fingerprinted>,
    backend: Backend,
    /// What the actor is doing about the worker (`pipeline/machine/`).
    phase: Phase,
    /// The last worker generation given out: a launch's report or a worker's exit
    /// of another generation is about a worker no longer supervised.
    generation: u64,
    /// Launches not reported back yet, abandoned ones included.
    launches_in_flight: usize,
    /// The last launch generation a stop abandoned: a relaunch waiting off the actor
    /// for its storage (`damaged.rs`) gives up when it reaches its own.
    abandoned_launch: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The local files of the generation being installed, as fingerprinted before
    /// its launch (see [`LaunchDone::files`]).
    launched_files: Option<(u64, LocalFiles)>,
    alerts: AlertSender,
    /// The decision log (`state/decisions.jsonl`) and its open incident.
    decisions: crate::decisions::Decisions,
    /// The evidence bundle of the hang being dealt with, for what is said of it.
    hang_bundle: Option<std::path::PathBuf>,
    /// What the actor keeps about the checks of the disk (`disk_wait.rs`).
    disk: disk_wait::DiskState,
}

/// Loads `state/pipeline.json`, re-adopts a worker that outlived the previous
/// daemon, and starts the actor task.
pub fn spawn(
    layout: Layout,
    config: Config,
    source: ConfigSource,
    alerts: AlertSender,
) -> Result<PipelineHandle> {
    let backend = backend_for(&layout, &config);
    spawn_sourced(layout, config, source, alerts, backend)
}

/// [`spawn`] with the launch backend given and no config file (unit tests pass a
/// fake backend).
#[cfg(test)]
fn spawn_with(
    layout: Layout,
    config: Config,
    alerts: AlertSender,
    backend: Backend,
) -> Result<PipelineHandle> {
    spawn_sourced(layout, config, ConfigSource::default(), alerts, backend)
}

fn spawn_sourced(
    layout: Layout,
    config: Config,
    source: ConfigSource,
    alerts: AlertSender,
    backend: Backend,
) -> Result<PipelineHandle> {
    let record = PipelineRecord::load(&layout)?;
    let (snapshot, snapshot_rx) = watch::channel(record.clone());
    let (transitions, _) = broadcast::channel(TRANSITIONS);
    let (inputs, inbox) = mpsc::unbounded_channel();
    let decisions =
        crate::decisions::Decisions::open(&layout, config.logging, Some(alerts.clone()));
    let mut actor = Actor {
        decisions,
        hang_bundle: None,
        disk: disk_wait::DiskState::default(),
        backend,
        reports: Reports(inputs.downgrade()),
        prunes_in_flight: 0,
        held_starts: Vec::new(),
        layout,
        config,
        source,
        record,
        unsaved: false,
        snapshot,
        transitions: transitions.clone(),
        phase: Phase::Idle,
        generation: 0,
        launches_in_flight: 0,
        abandoned_launch: Default::default(),
        launched_files: None,
        alerts,
    };
    actor.recover();
    tokio::spawn(actor.run(inbox));
    Ok(PipelineHandle {
        inputs: std::sync::Arc::new(move |cmd| inputs.send(Input::Command(cmd)).ok()),
        snapshot: snapshot_rx,
        transitions,
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

/// Everything the actor hears, on its one channel, in the order it was sent: the
/// handle's commands and what the actor's own tasks off the actor report back.
pub(super) enum Input {
    Command(Command),
    /// A launch done (`start.rs`).
    Launched(LaunchDone),
    /// A start's local files fingerprinted (`start.rs`).
    Fingerprinted(Box<Fingerprinted>),
    /// A hung worker's evidence taken (`evidence.rs`).
    Evidence(evidence::HangEvidence),
    /// A check of the disk done (`disk_wait.rs`).
    Disk(crate::pipeline::save_room::DiskCheck),
    /// A prune done (`prune.rs`).
    Pruned(Pruned),
    /// A worker ended.
    Exit(WorkerExit),
    /// A Slurm job moved.
    Job(JobChange),
}

/// The actor's tasks' way back to it. Weak: only the handles keep the channel open,
/// so the actor ends once the last handle is gone, whatever its tasks still hold; a
/// report sent after that is dropped.
#[derive(Clone)]
struct Reports(mpsc::WeakUnboundedSender<Input>);

impl Reports {
    fn send(&self, input: Input) {
        if let Some(tx) = self.0.upgrade() {
            let _ = tx.send(input);
        }
    }
}

impl Actor {
    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Input>) {
        // A detach waits for the launches in flight: the record must name the worker
        // it leaves running, and an abandoned launch's worker must be cancelled.
        let mut detaching = None;
        loop {
            tokio::select! {
                input = inbox.recv() => match input {
                    Some(Input::Command(Command::Detach { reply })) => detaching = Some(reply),
                    Some(input) => self.on_input(input),
                    None => break,
                },
                _ = sleep_until_opt(self.phase.deadline()) => self.on(Event::TimerFired),
            }
            if self.launches_in_flight == 0
                && let Some(reply) = detaching.take()
            {
                tracing::info!("pipeline actor detached; the worker is left running");
                let _ = reply.send(());
                break;
            }
        }
    }

    fn on_input(&mut self, input: Input) {
        match input {
            Input::Command(cmd) => self.on_command(cmd),
            Input::Launched(done) => self.on_launched(done),
            Input::Fingerprinted(f) => self.on_fingerprinted(*f),
            Input::Evidence(ev) => self.on_hang_evidence(ev),
            Input::Disk(check) => self.on_disk_checked(check),
            Input::Pruned(p) => self.on_pruned(p),
            Input::Exit(exit) => self.on_exit(exit),
            Input::Job(change) => self.on_job_change(change),
        }
    }

    /// Persists and publishes the record; a failed write is logged, not fatal
    /// (the worker must keep being supervised even on a full disk).
    /// Saves and publishes the record if a step changed it since the last commit.
    fn commit_changed(&mut self) {
        if self.unsaved {
            self.commit();
        }
    }

    fn commit(&mut self) {
        self.unsaved = false;
        if let Err(e) = self.record.save(&self.layout) {
            tracing::error!("{e:#}");
        }
        self.snapshot.send_replace(self.record.clone());
        // No subscriber yet (or none left) is no error.
        let _ = self.transitions.send(self.record.clone());
    }

    fn alert(&self, alert: Alert) {
        let _ = self.alerts.send(alert);
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Start { req, reply } => self.start(req, reply),
            Command::Stop {
                timeout,
                cause,
                reply,
            } => self.stop(timeout, cause, reply),
            Command::Hung(report) => self.on_hung(report),
            Command::ResumeMismatch(report) => self.on_resume_mismatch(report),
            Command::DiskShort => self.on_disk_short(),
            Command::Interval { run_dir, longest_s } => {
                let known = self.record.heartbeat_interval_s;
                self.on(Event::IntervalLearned { run_dir, longest_s });
                self.commit_changed();
                if self.record.heartbeat_interval_s != known {
                    tracing::info!(
                        "learned heartbeat interval: {longest_s:.3} s (the longest between two training steps so far)"
                    );
                }
            }
            Command::Prune { req, reply } => self.prune(req, Some(reply)),
            Command::Reload { reply } => {
                let _ = reply.send(self.reload());
            }
            Command::Ping { reply } | Command::Detach { reply } => {
                let _ = reply.send(());
            }
        }
    }

    /// A re-adopted worker is not our child: poll it (kill(pid, 0) + start time, or
    /// the Slurm job's state).
    fn watch_adopted(&self, generation: u64, step: PipelineStep, handle: WorkerHandle) {
        let jobs = self.reports.clone();
        let exit = self.backend.watch_adopted(
            &handle,
            super::timings::poll_interval(&self.config.supervisor),
            Box::new(move |update| {
                jobs.send(Input::Job(JobChange { generation, update }));
            }),
        );
        self.report_exit(generation, step, exit, None);
    }

    /// Reports the end of worker `generation` of `step` once `exit` resolves, with the
    /// local files `step` read: `files`, fingerprinted before it started, else (a
    /// worker adopted from a previous daemon) read on the blocking pool after it ended
    /// (its done-marker records them; a source folder may hold thousands of files).
    fn report_exit(
        &self,
        generation: u64,
        step: PipelineStep,
        exit: ExitFuture,
        files: Option<LocalFiles>,
    ) {
        let exits = self.reports.clone();
        let ran_with = self.ran_with(step).filter(|_| files.is_none());
        tokio::spawn(async move {
            let outcome = exit.await;
            let files = match (files, ran_with) {
                (Some(files), _) => files,
                (None, Some(config)) => {
                    tokio::task::spawn_blocking(move || LocalFiles::read_steps([step], &config))
                        .await
                        .unwrap_or_else(|e| {
                            tracing::error!("fingerprinting the files of step {step} failed: {e}");
                            LocalFiles::default()
                        })
                }
                (None, None) => LocalFiles::default(),
            };
            exits.send(Input::Exit(WorkerExit {
                generation,
                outcome,
                files,
            }));
        });
    }

    /// The config `step`'s worker ran with (the pipeline's copy), when the step reads
    /// local files.
    fn ran_with(&self, step: PipelineStep) -> Option<Config> {
        reads_local_files(step).then(|| super::plan::worker_config(&self.layout, &self.config))
    }

    /// A Slurm job moved (pending → running on a node → requeued …): the status shows it.
    fn on_job_change(&mut self, change: JobChange) {
        if self.phase.worker().map(|w| w.generation) != Some(change.generation) {
            return;
        }
        let Some(WorkerRecord {
            handle: WorkerHandle::Slurm { slurm },
            ..
        }) = self.record.worker()
        else {
            return;
        };
        let mut slurm = slurm.clone();
        let update = change.update;
        let newly_lost = update.message.is_some() && update.message != slurm.seen.message;
        slurm.state = Some(update.state);
        slurm.reason = update.reason;
        if update.node.is_some() {
            slurm.node = update.node;
        }
        slurm.seen.nodes = update.nodes;
        slurm.seen.message = update.message;
        slurm.seen.failed_on_node_loss = update.failed_on_node_loss;
        let message = slurm.seen.message.clone();
        self.on(Event::SlurmJobMoved(slurm));
        self.commit_changed();
        if let (true, Some(message), Some(step)) = (newly_lost, message, self.record.active_step) {
            self.node_lost_decided(step, &message);
            self.alert(Alert::NodeLost { step, message });
        }
    }
}
