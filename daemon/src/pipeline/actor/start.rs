//! A start and what follows it: the run prepared (see `plan::prepare`), each step
//! launched in turn, the "finished" alert and old runs pruned at the end.

use anyhow::Result;
use lavender::config::PipelineStep;
use lavender::status::{PipelineState, StepState};
use tokio::time::Instant;

use super::{Actor, JobChange, LiveWorker, WorkerExit};
use crate::alert::Alert;
use crate::pipeline::handle::{StartError, StartReply};
use crate::pipeline::plan;
use crate::pipeline::record::WorkerRecord;
use crate::pipeline::request::StartRequest;

impl Actor {
    pub(super) fn start(&mut self, req: StartRequest) -> Result<StartReply, StartError> {
        if self.record.is_active() {
            return Err(StartError::AlreadyRunning {
                state: self.record.state,
                pid: self.worker.as_ref().and_then(|w| w.handle.pid()),
            });
        }
        let plan::Prepared {
            record,
            chunk,
            scale,
            notices,
        } = plan::prepare(&self.layout, &self.config, req)?;
        self.record = record;
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
            scale,
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
    pub(super) fn advance(&mut self) {
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
        Alert::Finished {
            duration,
            final_loss,
            final_checkpoint,
        }
    }

    /// `supervisor.keep_runs`: once a pipeline has finished (so its own run holds the
    /// checkpoints it needs, not the run it resumed from), drop the oldest runs.
    pub(super) fn prune_old_runs(&self) {
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

    pub(super) fn spawn_step(&mut self, step: PipelineStep, after_crash: bool) -> Result<()> {
        let spec = plan::spawn_spec(&self.layout, &self.config, &self.record, step, after_crash);
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
}
