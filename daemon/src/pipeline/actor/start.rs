//! A start and what follows it: the config read, its steps' local files
//! fingerprinted (off the actor: a source folder may hold thousands), the run
//! prepared (see `plan::prepare`), each step launched in turn (off the actor:
//! `sbatch` may take seconds), the "finished" alert and old runs pruned at the end.

use std::path::Path;

use chrono::SubsecRound;
use lavender::config::{Config, PipelineStep};
use lavender::status::PipelineState;
use tokio::sync::oneshot;

use super::{Actor, Fingerprinted, Input, JobChange, LaunchDone, backend_for};
use crate::alert::Alert;
use crate::pipeline::handle::{StartError, StartReply};
use crate::pipeline::machine::{Event, Launching, PendingStart, Phase, Relaunch};
use crate::pipeline::plan;
use crate::process::{ExitFuture, SpawnSpec};
use lavender::pipeline_file::StartRequest;
use lavender::steps::inputs::{LocalFiles, reads_local_files};
use lavender::steps::start::ResolvedStart;

impl Actor {
    /// Reads the config the start names (or the daemon's own file, again) and has
    /// its steps' local files fingerprinted on the blocking pool; the start goes on in
    /// [`Actor::on_fingerprinted`]. `reply` is answered once the first step's launch
    /// has gone one way or the other.
    pub(super) fn start(
        &mut self,
        mut req: StartRequest,
        reply: oneshot::Sender<Result<StartReply, StartError>>,
    ) {
        let loaded = match self.source.read(req.config.as_ref()) {
            Ok(loaded) => loaded,
            Err(e) => {
                let _ = reply.send(Err(StartError::Invalid(e)));
                return;
            }
        };
        if let Some(refusal) = self.refusal(
            &req,
            loaded.as_ref().map(|l| (&l.config, l.file.path.as_path())),
        ) {
            let _ = reply.send(Err(refusal));
            return;
        }
        let (config, origins) = match loaded {
            Some(l) => {
                let missing = self.source.missing(&l.config, Some(&l.origins));
                if !missing.is_empty() {
                    let _ = reply.send(Err(StartError::Invalid(missing.join("\n"))));
                    return;
                }
                req.config = Some(l.file);
                (l.config, Some(l.origins))
            }
            None => (self.config.clone(), self.source.origins_without_file()),
        };
        if !config.steps.iter().any(|&s| reads_local_files(s)) {
            // No file to read: the start goes on at once.
            self.on_fingerprinted(Fingerprinted {
                req,
                reply,
                config,
                origins,
                files: LocalFiles::default(),
            });
            return;
        }
        let done = self.reports.clone();
        tokio::spawn(async move {
            let read = config.clone();
            let files = match tokio::task::spawn_blocking(move || LocalFiles::read(&read)).await {
                Ok(files) => files,
                Err(e) => {
                    let _ = reply.send(Err(StartError::Spawn(format!(
                        "fingerprinting the files the steps read failed: {e}"
                    ))));
                    return;
                }
            };
            done.send(Input::Fingerprinted(Box::new(Fingerprinted {
                req,
                reply,
                config,
                origins,
                files,
            })));
        });
    }

    /// A start's files fingerprinted: prepares the run and launches its first step
    /// (unless another start began meanwhile).
    pub(super) fn on_fingerprinted(&mut self, f: Fingerprinted) {
        if self.prunes_in_flight > 0 {
            // It would make a run, or resume from one, while runs are being deleted.
            self.held_starts.push(f);
            return;
        }
        let Fingerprinted {
            req,
            reply,
            config,
            origins,
            files,
        } = f;
        let file = req.config.as_ref().map(|c| c.path.clone());
        if let Some(refusal) = self.refusal(&req, file.as_deref().map(|p| (&config, p))) {
            let _ = reply.send(Err(refusal));
            return;
        }
        // Nothing to run: the record, the run and the pushes stay as they were.
        if let Some(line) =
            lavender::steps::nothing_to_do(&self.layout, &config, &files, &self.record, &req)
        {
            let _ = reply.send(Ok(self.nothing_to_do(&req, line)));
            return;
        }
        let start = plan::StartConfig {
            config: &config,
            origins: origins.as_ref(),
            files: &files,
        };
        let plan::Prepared {
            record,
            chunk,
            scale,
            notices,
            config_line,
        } = match plan::prepare(&self.layout, start, &self.record, req) {
            Ok(prepared) => prepared,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        tracing::info!("start: {config_line}");
        for notice in &notices {
            tracing::info!("start: {notice}");
        }
        // The config this start runs with is the daemon's from now on: a reload
        // reads its file again, a worker restart uses its worker keys.
        if let Some(file) = record.request.as_ref().and_then(|r| r.config.as_ref()) {
            self.source.file = Some(file.path.clone());
        }
        if config.launch != self.config.launch {
            self.backend = backend_for(&self.layout, &config);
        }
        self.config = config;
        self.on(Event::StartPrepared {
            record: Box::new(record),
            start: PendingStart {
                reply,
                chunk,
                scale,
                notices,
                config_line,
            },
        });
    }

    /// Why a start is refused while a pipeline is active (or its first step is being
    /// launched): the keys its config (`asked`: the config and its file) differs in,
    /// else that it runs. `None` when nothing is active.
    fn refusal(&self, req: &StartRequest, asked: Option<(&Config, &Path)>) -> Option<StartError> {
        if !(self.record.is_active() || matches!(self.phase, Phase::Launching { .. })) {
            return None;
        }
        let pid = self.phase.worker().and_then(|w| w.handle.pid());
        Some(
            match asked.and_then(|(config, file)| self.differs_from_running(req, config, file)) {
                Some(message) => StartError::ConfigDiffers(message),
                None => StartError::AlreadyRunning {
                    state: self.record.state.kind(),
                    pid,
                },
            },
        )
    }

    /// While a pipeline runs, a start naming a config whose values differ from those
    /// it started with: the refusal naming the keys.
    fn differs_from_running(
        &self,
        req: &StartRequest,
        config: &Config,
        file: &Path,
    ) -> Option<String> {
        let running = plan::worker_config(&self.layout, &self.config);
        let mut asked = config.clone();
        let resolved = ResolvedStart::resolve(req, config, &self.record);
        (asked.scale, asked.chunk) = (resolved.scale, resolved.chunk);
        let keys = lavender::config::changed_keys(&running, &asked);
        if keys.is_empty() {
            return None;
        }
        Some(format!(
            "the pipeline is {} with the config it started with; {} differs in {}: stop it first (lavenderd stop) and start again, or apply what a reload applies while it runs (lavenderd reload)",
            match self.record.state.kind() {
                PipelineState::Crashed => "waiting to restart after a crash",
                PipelineState::WaitingForDisk => "waiting for disk space to resume",
                PipelineState::Stopping => "stopping",
                _ => "running",
            },
            file.display(),
            keys.join(", ")
        ))
    }

    /// The answer to a start with nothing to do: the pipeline as it is, and the line.
    fn nothing_to_do(&self, req: &StartRequest, line: String) -> StartReply {
        let resolved = ResolvedStart::resolve(req, &self.config, &self.record);
        StartReply {
            state: self.record.state.kind(),
            chunk: resolved.chunk,
            scale: resolved.scale,
            active_step: None,
            pid: None,
            run_dir: self.record.run_dir.clone(),
            log_file: None,
            resume_from: None,
            slurm_job: None,
            notices: Vec::new(),
            config: None,
            nothing_to_do: Some(line),
        }
    }

    /// Answers the start that waited for its first step's launch.
    pub(super) fn answer_start(&mut self, start: PendingStart) {
        let reply = if self.record.state.kind() == PipelineState::Failed {
            Err(StartError::Spawn(
                self.record
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "the first step could not be started".into()),
            ))
        } else {
            Ok(StartReply {
                state: self.record.state.kind(),
                chunk: start.chunk,
                scale: start.scale,
                active_step: self.record.active_step,
                pid: self.phase.worker().and_then(|w| w.handle.pid()),
                run_dir: self.record.run_dir.clone(),
                log_file: self.record.log_file.clone(),
                resume_from: self.record.resume_from.clone(),
                slurm_job: self
                    .phase
                    .worker()
                    .and_then(|w| w.handle.slurm_job())
                    .map(|j| j.job_id.clone()),
                notices: start.notices,
                config: Some(start.config_line),
                nothing_to_do: None,
            })
        };
        let _ = start.reply.send(reply);
    }

    /// Every step is done (the record says finished): told, old runs pruned;
    /// `start`: the start whose reply waits for that.
    pub(super) fn finished(&mut self, start: Option<PendingStart>) {
        tracing::info!("pipeline finished");
        self.commit();
        self.alert(self.finished_alert());
        self.prune_old_runs();
        if let Some(start) = start {
            self.answer_start(start);
        }
    }

    /// The run's summary for the "finished" push: time since the run directory was
    /// created, the last heartbeat's loss, the latest complete checkpoint.
    pub(super) fn finished_alert(&self) -> Alert {
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
        // The ledger as last saved (at most a few seconds behind the finish).
        let goodput = run_dir
            .and_then(|d| d.file_name())
            .and_then(|n| {
                lavender::goodput::read_status(&self.layout.state_dir, &n.to_string_lossy())
            })
            .map(|g| g.line());
        Alert::Finished {
            duration,
            final_loss,
            final_checkpoint,
            goodput,
        }
    }

    /// `supervisor.keep_runs`: once a pipeline has finished (so its own run holds the
    /// checkpoints it needs, not the run it resumed from), drop the oldest runs, on
    /// the blocking pool (a run is gigabytes of files).
    pub(super) fn prune_old_runs(&mut self) {
        let Some(keep) = self.config.supervisor.keep_runs else {
            return;
        };
        if self.observing() {
            tracing::info!(
                "observe mode (supervisor.mode: observe): would have kept {keep} run(s) (supervisor.keep_runs); nothing deleted"
            );
            return;
        }
        let current = self.record.run_dir.clone();
        self.prune_runs(keep as usize, current, crate::old_runs::Delete::All, None);
    }

    /// Launches `step` on the blocking pool (`sbatch` may take seconds; a local spawn
    /// forks); [`Actor::on_launched`] takes the worker, or fails the step.
    /// `relaunch`: why the daemon launches it again by itself (from the run's
    /// newest complete checkpoint); `start`: the start whose reply waits for it.
    pub(super) fn spawn_step(
        &mut self,
        step: PipelineStep,
        relaunch: Option<Relaunch>,
        start: Option<PendingStart>,
    ) {
        let after_crash = relaunch.is_some();
        let spec = plan::spawn_spec(&self.layout, &self.config, &self.record, step, after_crash);
        // A training worker brought back by the daemon: the step its checkpoint was
        // saved at (0 without one). Ending without training past it is no progress.
        let resumed_from_step = (after_crash && step == PipelineStep::Train).then(|| {
            spec.resume
                .as_deref()
                .and_then(|p| lavender::trainer_state::read(p).ok())
                .map_or(0, |s| s.step)
        });
        self.generation += 1;
        let launch = Launching {
            generation: self.generation,
            step,
            resume: spec.resume.clone(),
            resumed_from_step,
            relaunch,
            started_at: lavender::time::now_utc().trunc_subsecs(3),
        };
        self.on(Event::LaunchAsked {
            launch,
            spec: Box::new(spec),
            start,
        });
    }

    /// Launches worker `generation` off the actor; it reports back with a [`LaunchDone`].
    pub(super) fn launch(&mut self, generation: u64, spec: Box<SpawnSpec>) {
        self.launches_in_flight += 1;
        let step = spec.step;
        let jobs = self.reports.clone();
        let backend = self.backend.clone();
        let done = self.reports.clone();
        let check = self.resume_check(step);
        let ran_with = self.ran_with(step);
        // Observe mode leaves the run's files as they are: no replay check.
        // The trackers' ids for the worker (it may make the lineage's MLflow run).
        let tracking = (step == PipelineStep::Train && self.config.tracking.any())
            .then(|| (self.config.clone(), self.layout.state_dir.clone()));
        let replay = (step == PipelineStep::Train && !self.observing()).then(|| {
            (
                self.layout.state_dir.clone(),
                self.config.replay_tolerance(),
            )
        });
        tokio::spawn(async move {
            let launch = tokio::task::spawn_blocking(move || {
                let mut spec = spec;
                // Before the worker exists: its done-marker records what it will read.
                let files = ran_with
                    .map(|config| LocalFiles::read_steps([step], &config))
                    .unwrap_or_default();
                // The checkpoint to resume from is read back before the worker starts.
                let checked = check.map(|c| c.run(&mut spec));
                if let Some(refusal) = checked.as_ref().and_then(|c| c.refusal.clone()) {
                    return (Err(anyhow::anyhow!(refusal)), checked, files);
                }
                if let Some((state_dir, tolerance)) = &replay {
                    keep_replay(state_dir, &spec, *tolerance);
                }
                if let (Some((config, state_dir)), Some(run_dir)) =
                    (&tracking, spec.run_dir.clone())
                {
                    let env = crate::tracking::launch_env(
                        config,
                        state_dir,
                        &run_dir,
                        spec.resume.as_deref(),
                    );
                    // `worker.env` wins: a key the operator set is left as set.
                    for (k, v) in env {
                        spec.env.entry(k).or_insert(v);
                    }
                }
                let updates = Box::new(move |update| {
                    jobs.send(Input::Job(JobChange { generation, update }));
                });
                (backend.launch(&spec, updates), checked, files)
            });
            let (result, checked, files) = launch.await.unwrap_or_else(|e| {
                let e = anyhow::anyhow!("the launch of step {step} failed: {e}");
                (Err(e), None, LocalFiles::default())
            });
            done.send(Input::Launched(LaunchDone {
                generation,
                result,
                checked,
                files,
            }));
        });
    }

    /// A launch ended: the worker is supervised from now on, or the step failed (after
    /// a crash, with that crash's exit). The worker of a launch a stop abandoned is
    /// cancelled: it has not trained yet.
    pub(super) fn on_launched(&mut self, done: LaunchDone) {
        self.launches_in_flight = self.launches_in_flight.saturating_sub(1);
        if let Some(checked) = done.checked {
            self.on_checked(done.generation, checked);
        }
        let (result, exit) = match done.result {
            Ok(launched) => (Ok(launched.handle), Some(launched.exit)),
            Err(e) => (Err(format!("{e:#}")), None),
        };
        let generation = done.generation;
        self.launched_files = Some((generation, done.files));
        self.on_with_exit(Event::LaunchFinished { generation, result }, exit);
        self.launched_files = None;
    }

    /// The launched worker runs (the phase holds it): the record names it, says why
    /// it was launched again, and its exit is watched.
    pub(super) fn install(&mut self, launching: Launching, exit: ExitFuture) {
        let Some(worker) = self.phase.worker() else {
            return;
        };
        let handle = worker.handle.clone();
        let (step, generation, after_crash) = (
            launching.step,
            launching.generation,
            launching.after_crash(),
        );
        let resumed_from_step = launching.resumed_from_step;
        tracing::info!(%step, worker = %handle, after_crash, "worker started");
        let said = launching
            .relaunch
            .map(|why| self.relaunched(step, why, launching.resume.as_deref()));
        self.hang_bundle = None;
        self.commit();
        if let Some(alert) = said.flatten() {
            self.alert(alert);
        }
        let files = self
            .launched_files
            .take()
            .filter(|(g, _)| *g == generation)
            .map(|(_, files)| files);
        self.report_exit(generation, step, exit, files);
        let poll = crate::pipeline::timings::poll_interval(&self.config.supervisor);
        self.decisions.worker_running(
            step,
            self.record.run_dir.as_deref(),
            resumed_from_step,
            poll,
        );
    }
}

/// Before a training worker resumes from a checkpoint of the run it writes: the
/// steps its run recorded past the checkpoint are kept for the replay check
/// (`lavender::replay::keep`, followed by `crate::replay`). A failure is logged: the
/// launch goes on without the check.
fn keep_replay(state_dir: &Path, spec: &SpawnSpec, tolerance: lavender::replay::Tolerance) {
    let (Some(checkpoint), Some(run_dir)) = (spec.resume.as_deref(), spec.run_dir.as_deref())
    else {
        return;
    };
    if checkpoint.parent() != Some(run_dir) {
        return;
    }
    keep_replay_at(state_dir, run_dir, checkpoint, tolerance);
}

/// [`keep_replay`] of a resume from `checkpoint` of `run_dir` (a requeued Slurm job's
/// too: `decided.rs`).
pub(super) fn keep_replay_at(
    state_dir: &Path,
    run_dir: &Path,
    checkpoint: &Path,
    tolerance: lavender::replay::Tolerance,
) {
    match lavender::replay::keep(state_dir, run_dir, checkpoint, tolerance) {
        Ok(Some(replay)) => tracing::info!(
            "replay check: the {} step(s) past {} (step {}) will be compared as the worker trains them again ({tolerance})",
            replay.expected.len(),
            replay.checkpoint,
            replay.from_step
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(
            "replay check: could not keep the steps past {}: {e}; this resume goes unchecked",
            checkpoint.display()
        ),
    }
}
