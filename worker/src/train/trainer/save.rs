//! The Trainer's saves through the core library's `CheckpointBuilder`.
//!
//! A save stalls training only while the tensors are copied to host memory; a
//! background writer thread then writes the copy (hashing the bytes as they go out),
//! writes `manifest.json`, fsyncs and commits (the marker last, then the rename) and
//! applies retention. At most one save is in flight, and
//! a stop or the final save waits until it is durable before the process exits.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lavender::checkpoint::CheckpointBuilder;
use lavender::checkpoint::contents::{self, ContentManifest, FileEntry, HashAlgorithm};
use lavender::checkpoint::{self, CheckpointName};
use lavender::config::SaveOptimizerState;
use lavender::events::{Event, kind as kinds};
use lavender::heartbeat::WorkerState;
use lavender::trainer_state::TrainerState;
use lavender::trainlog;
use serde_json::{Value, json};

use super::Trainer;
use super::in_flight::{NextBuffers, PendingSave, Written};
use crate::model::{self, MODEL_FILE};
use crate::optim::adamw::OPTIMIZER_FILE;
use crate::train::checkpointing::{DIVERGENCE, FINAL_STAGE, REFERENCE_STEP, SKIP_STEPS};
use crate::train::ema::EMA_FILE;
use crate::train::precision::LOSS_SCALER_KEY;
use crate::train::settings::StageKind;

/// The file whose appearance in the run directory releases a save held by
/// `--hold-save` (a `.tmp-` name: no listing counts it as a checkpoint).
#[cfg(feature = "test-hooks")]
const HOLD_RELEASE_FILE: &str = ".tmp-release-held-save";

/// The manifest's hash: BLAKE3 keeps up with the disk on one core.
const HASH: HashAlgorithm = HashAlgorithm::Blake3;
const RNG_SCHEME: &str = "stateless: data order from (seed, stage, epoch), dropout reseeded from (seed, step, micro-batch)";

impl Trainer {
    /// Starts a checkpoint named after `stage`: waits for the save in flight (if
    /// any), copies weights and optimizer moments to host memory, and hands writing,
    /// fsync, the commit (files durable, the marker last, then the rename) and
    /// retention to a background thread. Training may go on as soon as this returns:
    /// the writer reads only its copy. [`Trainer::finish_save`] reports the save
    /// once it is durable.
    /// The heartbeat says `saving` from the start (waiting for the previous save
    /// holds training too) until the caller ends the phase.
    pub fn save(&mut self, stage: &str, kind: Option<StageKind>) -> Result<()> {
        let entered = Instant::now();
        // Every step's values reach the host (and the divergence detector) before a
        // checkpoint of them is made: a diverged state is never saved.
        self.flush_steps()?;
        anyhow::ensure!(
            self.divergence.seen_through() >= self.progress.step,
            "internal: step {} would be saved before its loss was judged (judged through step {})",
            self.progress.step,
            self.divergence.seen_through()
        );
        self.reporter.phase(WorkerState::Saving)?;
        self.finish_save()?;
        let waited = entered.elapsed();
        let at = lavender::time::now_utc();
        let counter = checkpoint::next_counter(&self.run_dir)?;
        let name = CheckpointName::new(stage, at.time(), counter)?;
        let builder = CheckpointBuilder::begin(&self.run_dir, &name)?;
        let began = Instant::now();
        let mut buffers = self.save_buffers.take();
        model::snapshot_weights(&self.model, &mut buffers.weights)?;
        let with_optimizer = self.s.save_optimizer_state != SaveOptimizerState::None;
        if with_optimizer {
            self.opt
                .snapshot(&self.model.params, &mut buffers.moments)?;
        }
        let with_ema = self.ema.is_some();
        if let Some(ema) = &self.ema {
            ema.snapshot(&mut buffers.ema)?;
        }
        let copy = began.elapsed();
        // Complete before the checkpoint it belongs to becomes visible.
        self.history.materialize()?;
        let state = self.trainer_state(stage, with_optimizer);
        self.saves_started += 1;
        #[cfg(feature = "test-hooks")]
        let hold = self.hold_save == Some(self.saves_started);
        let (run_dir, keep, only_last) = (
            self.run_dir.clone(),
            self.s.keep_checkpoints,
            self.s.save_optimizer_state == SaveOptimizerState::Last,
        );
        let writer = std::thread::Builder::new()
            .name("checkpoint-writer".into())
            .spawn(move || -> Result<Written> {
                let started = Instant::now();
                let dir = builder.dir();
                // Both files at once: on a machine whose cores are busy training, two
                // writers get a larger share of the CPU for the copy into the page
                // cache, and the disk has both files' writeback to work on. Each file
                // is hashed from the bytes going out, for the manifest.
                let files = std::thread::scope(|s| -> Result<Vec<FileEntry>> {
                    let weights = s.spawn(|| buffers.weights.write_hashed(dir, MODEL_FILE, HASH));
                    let mut files = Vec::with_capacity(3);
                    if with_optimizer {
                        files.push(buffers.moments.write_hashed(dir, OPTIMIZER_FILE, HASH)?);
                    }
                    if with_ema {
                        files.push(buffers.ema.write_hashed(dir, EMA_FILE, HASH)?);
                    }
                    files.push(
                        weights
                            .join()
                            .map_err(|_| anyhow::anyhow!("the weights writer thread panicked"))??,
                    );
                    Ok(files)
                })?;
                // Written and fsynced before the marker: a complete checkpoint always
                // has its manifest.
                contents::write(dir, &ContentManifest::new(HASH, files))?;
                #[cfg(feature = "test-hooks")]
                if hold {
                    // Test hook (`--hold-save`): the files and the manifest are written; the commit waits
                    // for the test's release file (or the process is killed).
                    let release = run_dir.join(HOLD_RELEASE_FILE);
                    while !release.exists() {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                let write = started.elapsed();
                // Fsyncs every file, then writes the marker, then renames.
                let path = builder.commit(&state)?;
                let durable_at = Instant::now();
                // Only after the commit: a kill before it leaves the older
                // checkpoints (and their moments) as they were.
                if only_last {
                    drop_older_optimizer_state(&run_dir, &path)?;
                }
                let dropped = checkpoint::enforce_retention(&run_dir, keep)?;
                Ok(Written {
                    path,
                    dropped,
                    buffers,
                    write,
                    durable_at,
                })
            })
            .context("could not start the checkpoint writer thread")?;
        self.progress.saved_step = Some(self.progress.step);
        let epoch = self.reporter.hb.epoch.unwrap_or(0.0);
        let mut pending = PendingSave {
            writer,
            name: name.to_string(),
            stage: stage.to_string(),
            kind,
            step: self.progress.step,
            loss: self.progress.last_loss,
            ema_eval_loss: self
                .step_evaluation_now()
                .and_then(|e| e.ema.as_ref())
                .map(|e| e.loss),
            epoch,
            epochs: self.reporter.hb.epochs,
            remaining_hours: self.reporter.remaining_hours(),
            at,
            began,
            stall: Duration::ZERO,
            waited,
            copy,
        };
        pending.stall = entered.elapsed();
        self.pending_save = Some(pending);
        Ok(())
    }

    /// Waits until the save in flight (if any) is durable, then reports it:
    /// `train.log`, retention's event, the `checkpoint_saved` event. Returns its path.
    pub fn finish_save(&mut self) -> Result<Option<PathBuf>> {
        let Some(p) = self.pending_save.take() else {
            return Ok(None);
        };
        let written = p
            .writer
            .join()
            .map_err(|_| anyhow::anyhow!("the checkpoint writer thread panicked"))??;
        self.save_buffers = NextBuffers::Ready(written.buffers);
        let (path, durable) = (written.path, written.durable_at - p.began);
        let write = written.write;
        let name = p.name;
        trainlog::log_save(&self.run_dir, &name, p.at)?;
        trainlog::log_retain(&self.run_dir, written.dropped.len())?;
        if !written.dropped.is_empty() {
            let names: Vec<String> = written
                .dropped
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            self.reporter.event(
                Event::new(
                    kinds::RETENTION,
                    format!("retention dropped {} old checkpoint(s)", names.len()),
                )
                .with("dropped", names),
            )?;
        }
        self.progress.latest_checkpoint = Some(name.clone());
        self.reporter.hb.latest_checkpoint = Some(name.clone());

        let mut message = format!("checkpoint saved: {name}");
        if let Some(n) = p.epochs {
            message.push_str(&format!(
                ", epoch {}/{n}",
                (p.epoch.floor() as u64 + 1).min(n as u64)
            ));
        }
        if let (Some(k), Some(l)) = (p.kind, p.loss) {
            message.push_str(&format!(
                ", {} {l:.3}",
                k.loss_key().trim_end_matches("_loss").to_uppercase()
            ));
        }
        if let Some(h) = p.remaining_hours {
            message.push_str(&format!(", ETA {h:.1}h"));
        }
        let mut ev = Event::new(kinds::CHECKPOINT_SAVED, message)
            .with("name", &name)
            .with("path", &path)
            .with("step", p.step)
            .with("stage", &p.stage)
            .with("epoch", p.epoch)
            .with("epochs", p.epochs)
            .with("remaining_hours", p.remaining_hours)
            // Training stood still for `stall_s` (of which `wait_s` waiting for the
            // previous save and `copy_s` copying to host memory); the files were
            // durable `durable_s` after the copy began, `write_s` of it spent writing
            // them on the writer thread (the rest: the copy, then fsync and commit).
            .with("stall_s", p.stall.as_secs_f64())
            .with("wait_s", p.waited.as_secs_f64())
            .with("copy_s", p.copy.as_secs_f64())
            .with("write_s", write.as_secs_f64())
            .with("durable_s", durable.as_secs_f64());
        if let Some(k) = p.kind {
            ev = ev.with(k.loss_key(), p.loss);
        }
        if let Some(l) = p.ema_eval_loss {
            ev = ev.with("ema_eval_loss", l);
        }
        self.reporter.event(ev)?;
        Ok(Some(path))
    }

    /// Reports the save in flight if its writer is done, without waiting.
    pub fn poll_save(&mut self) -> Result<()> {
        if self.pending_save.as_ref().is_some_and(PendingSave::is_done) {
            self.finish_save()?;
        }
        Ok(())
    }

    /// The `final-…` checkpoint after the last stage, durable before this returns.
    pub fn save_final(&mut self) -> Result<()> {
        let kind = self.s.stages.last().map(|s| s.kind);
        self.save(FINAL_STAGE, kind)?;
        let path = self.finish_save()?.unwrap_or_default();
        let name = self.progress.latest_checkpoint.clone().unwrap_or_default();
        self.reporter.event(
            Event::new(kinds::FINAL_SAVED, format!("final checkpoint: {name}"))
                .with("name", &name)
                .with("path", &path)
                .with("step", self.progress.step),
        )?;
        Ok(())
    }

    fn trainer_state(&self, stage: &str, with_optimizer: bool) -> TrainerState {
        let mut st = TrainerState::new(stage, self.progress.step);
        st.total_steps = self.s.total_steps();
        st.epoch = self.reporter.hb.epoch.unwrap_or(0.0);
        st.epochs = self.reporter.hb.epochs;
        st.stage_step = self.progress.pos.stage_step;
        st.lr = self.progress.last_lr;
        st.loss = self.progress.last_loss;
        // Measured at this very step (a save evaluates first): retention keeps each
        // stage's best checkpoint by it, so a stale one would misjudge the checkpoint.
        let eval = self.evaluation_now();
        st.val_loss = eval.map(|e| e.loss).filter(|l| l.is_finite());
        st.best_val_loss = self.progress.best_val_loss;
        st.data_cursor = json!({
            "stage": self.s.stages.get(self.progress.pos.stage_index).map(|s| s.name.clone()),
            "stage_index": self.progress.pos.stage_index,
            "epoch": self.progress.pos.cursor.epoch,
            "index": self.progress.pos.cursor.index,
            "chunk": self.s.chunk,
            "shards": self.shards,
        });
        if self.progress.skip_steps > 0 {
            st.data_cursor[SKIP_STEPS] = json!(self.progress.skip_steps);
        }
        st.rng_state = json!({ "seed": self.s.seed, "scheme": RNG_SCHEME });
        st.wall_time_s = self.wall_time_s();
        st.saved_at = lavender::time::rfc3339_z(lavender::time::now_utc());
        st.extra.insert("chunk".into(), json!(self.s.chunk));
        st.extra
            .insert("optimizer_state".into(), json!(with_optimizer));
        st.extra
            .insert("optimizer_step".into(), json!(self.opt.step));
        st.extra.insert(
            lavender::skips::APPLIED_KEY.into(),
            json!(self.progress.skips_applied),
        );
        st.extra
            .insert(DIVERGENCE.into(), json!(self.divergence.state()));
        st.extra
            .insert("precision".into(), json!(self.precision.as_str()));
        if let Some(scaler) = self.progress.loss_scaler {
            st.extra.insert(LOSS_SCALER_KEY.into(), scaler.to_json());
        }
        if let Some(r) = self.reference_step {
            st.extra.insert(REFERENCE_STEP.into(), json!(r));
        }
        if let Some(eval) = eval {
            let mut m = serde_json::Map::new();
            m.insert("loss".into(), json!(eval.loss));
            for (k, v) in &eval.metrics {
                m.insert((*k).into(), json!(v));
            }
            let ema = self.step_evaluation_now().and_then(|e| e.ema.as_ref());
            if let Some(ema) = ema {
                m.insert("ema_loss".into(), json!(ema.loss));
            }
            st.extra.insert("eval".into(), Value::Object(m));
        }
        st
    }
}

/// `save_optimizer_state: last` keeps moments only in the newest checkpoint.
fn drop_older_optimizer_state(run_dir: &Path, newest: &Path) -> Result<()> {
    for c in checkpoint::list_run_checkpoints(run_dir)? {
        if c.path != newest {
            let f = c.path.join(OPTIMIZER_FILE);
            if !f.exists() {
                continue;
            }
            // Out of the manifest first, so the checkpoint still verifies without it.
            contents::forget(&c.path, OPTIMIZER_FILE)?;
            match std::fs::remove_file(&f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("could not remove {}", f.display()));
                }
            }
        }
    }
    Ok(())
}
