//! The training loop: stages in order, optimizer steps, evaluation, checkpoints,
//! and a stop flag checked at every step boundary.

mod save;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use lavender::checkpoint::Checkpoint;
use lavender::config::SaveOptimizerState;
use lavender::events::{Event, kind as kinds};
use lavender::heartbeat::WorkerState;
use serde_json::json;
use tch::Device;

use super::checkpointing::{Position, Progress, REFERENCE_FILE, REFERENCE_STEP, Resumed};
use super::data::{DpoData, PretrainData, Sampler, SftData, validation_batches};
use super::history::History;
use super::objective::{Eval, Objective};
use super::rng::seed_torch;
use super::settings::{Settings, Stage, StageKind};
use super::status::Reporter;
use crate::hard_examples;
use crate::model::Gpt;
use crate::optim::{AdamW, LrSchedule, clip_grad_norm};
use crate::tokens::{Split, Tokens};
use save::{NextBuffers, PendingSave, SaveBuffers};

/// How a call to [`Trainer::run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Finished,
    Stopped,
}

/// What a [`Trainer`] is built from: the run's settings, data, model and outputs,
/// assembled by `train`.
pub struct Parts {
    pub s: Settings,
    pub device: Device,
    pub run_dir: PathBuf,
    pub tokens: Tokens,
    pub shards: Vec<String>,
    pub model: Gpt,
    pub opt: AdamW,
    pub history: History,
    pub reporter: Reporter,
    /// Set by SIGTERM/SIGINT; read at step boundaries.
    pub stop: Arc<AtomicBool>,
    /// Test hook: behave as if SIGTERM arrived once this global step is done.
    pub stop_at_step: Option<u64>,
    /// Test hook: the writer of this save (1-based) never commits it.
    #[cfg(feature = "test-hooks")]
    pub hold_save: Option<u32>,
    /// When this process started, for the run's wall time.
    pub started: Instant,
}

/// An evaluation and where it was made: a checkpoint's validation loss is the one
/// measured at its own step, in its own stage.
#[derive(Debug, Clone)]
struct StepEval {
    step: u64,
    stage_index: usize,
    eval: Eval,
}

pub struct Trainer {
    s: Settings,
    device: Device,
    run_dir: PathBuf,
    tokens: Tokens,
    shards: Vec<String>,
    model: Gpt,
    opt: AdamW,
    history: History,
    reporter: Reporter,
    stop: Arc<AtomicBool>,
    stop_at_step: Option<u64>,
    #[cfg(feature = "test-hooks")]
    hold_save: Option<u32>,
    started: Instant,
    /// What a checkpoint restores: step, position, losses, wall time, latest save.
    progress: Progress,
    /// The latest evaluation (not restored: the next save evaluates at its own step).
    last_eval: Option<StepEval>,
    /// The checkpoint being written in the background, if any (at most one).
    pending_save: Option<PendingSave>,
    /// Host memory for the next save's copy.
    save_buffers: NextBuffers,
    /// Saves started by this process.
    saves_started: u32,
    /// The frozen DPO reference, when resuming mid-DPO.
    reference: Option<Gpt>,
    /// The global step at which the current DPO reference was taken.
    reference_step: Option<u64>,
}

impl Trainer {
    /// A trainer at step 0 of the first stage; [`Trainer::resume_from`] moves it to
    /// where a checkpoint left off.
    pub fn new(p: Parts) -> Trainer {
        let save_buffers = SaveBuffers::prepare(
            p.model.params.numel(),
            p.s.save_optimizer_state != SaveOptimizerState::None,
        );
        Trainer {
            s: p.s,
            device: p.device,
            run_dir: p.run_dir,
            tokens: p.tokens,
            shards: p.shards,
            model: p.model,
            opt: p.opt,
            history: p.history,
            reporter: p.reporter,
            stop: p.stop,
            stop_at_step: p.stop_at_step,
            #[cfg(feature = "test-hooks")]
            hold_save: p.hold_save,
            started: p.started,
            progress: Progress::default(),
            last_eval: None,
            pending_save: None,
            save_buffers,
            saves_started: 0,
            reference: None,
            reference_step: None,
        }
    }

    /// Continues from `ck`, whose weights and moments are loaded already: restores
    /// its progress and DPO reference and reports the load (`checkpoint_loaded`).
    pub fn resume_from(&mut self, ck: &Checkpoint, r: Resumed) -> Result<()> {
        self.progress = r.progress;
        self.reporter.hb.latest_checkpoint = Some(ck.name.clone());
        self.reporter.resumed_at(self.progress.step);
        if let Some(reference) = r.reference {
            if ck.path.parent() != Some(self.run_dir.as_path()) {
                self.save_reference(&reference, r.reference_step.unwrap_or(0))?;
            }
            self.reference_step = r.reference_step;
            self.reference = Some(reference);
        }
        let mut message = format!("checkpoint loaded: {}", ck.name);
        if r.new_chunk {
            message.push_str(&format!(
                " (continuing its weights into chunk {})",
                self.s.chunk
            ));
        }
        if !r.optimizer_loaded {
            let warning = format!(
                "checkpoint {} has no {}; training continues with fresh AdamW moments",
                ck.path.display(),
                crate::optim::adamw::OPTIMIZER_FILE
            );
            eprintln!("warning: {warning}");
            message.push_str(&format!("; {warning}"));
        }
        self.reporter.event(
            Event::new(kinds::CHECKPOINT_LOADED, message)
                .with("name", &ck.name)
                .with("path", &ck.path)
                .with("step", self.progress.step)
                .with("optimizer_state", r.optimizer_loaded)
                .with("new_chunk", r.new_chunk),
        )
    }

    /// Optimizer steps done over all stages.
    pub fn step(&self) -> u64 {
        self.progress.step
    }

    /// The newest checkpoint written or loaded.
    pub fn latest_checkpoint(&self) -> Option<&str> {
        self.progress.latest_checkpoint.as_deref()
    }

    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn wall_time_s(&self) -> f64 {
        self.progress.wall_before + self.started.elapsed().as_secs_f64()
    }

    /// Trains to the end (or a stop); a checkpoint still being written is durable
    /// before this returns, whatever the outcome.
    pub fn run(&mut self) -> Result<Outcome> {
        let outcome = self.run_stages();
        let saved = self.finish_save();
        let outcome = outcome?;
        saved?;
        Ok(outcome)
    }

    fn run_stages(&mut self) -> Result<Outcome> {
        if !self.progress.pos.finished {
            let stages = self.s.stages.clone();
            for (idx, stage) in stages.iter().enumerate() {
                if idx < self.progress.pos.stage_index {
                    continue;
                }
                if idx > self.progress.pos.stage_index {
                    self.progress.pos = Position {
                        stage_index: idx,
                        ..Position::default()
                    };
                }
                if self.run_stage(stage, idx + 1 == stages.len())? == Outcome::Stopped {
                    return Ok(Outcome::Stopped);
                }
            }
            self.save_final()?;
        }
        self.reporter.set_state(WorkerState::Finished)?;
        Ok(Outcome::Finished)
    }

    fn objective(&mut self, stage: &Stage) -> Result<Objective> {
        let (bs, seq, nb, dev) = (
            self.s.batch_size,
            self.s.seq_len,
            self.s.eval_batches,
            self.device,
        );
        Ok(match stage.kind {
            StageKind::Pretrain => {
                let arrays = self
                    .shards
                    .iter()
                    .map(|s| self.tokens.pretrain_shard(s))
                    .collect::<Result<Vec<_>>>()?;
                let mut data = PretrainData::new(arrays, seq)?;
                if let Some(hard) = self.hard_examples()? {
                    data.add_windows(hard);
                }
                let val = self.tokens.pretrain_validation()?;
                Objective::Pretrain {
                    eval: validation_batches(&val, seq, bs, nb, dev)?,
                    data,
                }
            }
            StageKind::Sft => {
                let data = SftData::new(self.tokens.sft(Split::Train)?, seq, "training")?;
                let held = SftData::new(self.tokens.sft(Split::Heldout)?, seq, "held-out")?;
                let n = held.len().min(bs * nb);
                let idx: Vec<usize> = (0..n).collect();
                Objective::Sft {
                    eval: idx.chunks(bs).map(|c| held.batch(c, dev)).collect(),
                    data,
                }
            }
            StageKind::Dpo => {
                let data = DpoData::new(self.tokens.dpo(Split::Train)?, seq, "training")?;
                let held = DpoData::new(self.tokens.dpo(Split::Heldout)?, seq, "held-out")?;
                let n = held.len().min(bs * nb);
                let idx: Vec<usize> = (0..n).collect();
                let reference = match self.reference.take() {
                    Some(r) => r,
                    None => {
                        let r = self.model.frozen_copy();
                        self.save_reference(&r, self.progress.step)?;
                        r
                    }
                };
                Objective::Dpo {
                    eval: idx.chunks(bs).map(|c| held.batch(c, dev)).collect(),
                    data,
                    reference: Box::new(reference),
                    beta: stage.beta,
                }
            }
        })
    }

    fn run_stage(&mut self, stage: &Stage, last_stage: bool) -> Result<Outcome> {
        let objective = self.objective(stage)?;
        let mut sampler = Sampler::new(
            objective.len(),
            self.s.seed,
            &stage.name,
            self.progress.pos.cursor,
        );
        let per_step = self.s.batch_size as u64 * self.s.grad_accum;
        let epochs = (stage.steps * per_step)
            .div_ceil(objective.len() as u64)
            .max(1) as u32;
        let sched = LrSchedule::new(
            stage.lr,
            self.s.warmup_steps,
            stage.steps,
            self.s.min_lr_ratio,
        );
        self.reporter.hb.stage = stage.name.clone();
        self.reporter.hb.epochs = Some(epochs);
        self.reporter.hb.epoch = Some(sampler.epoch_progress());

        if self.progress.pos.stage_step == 0 {
            self.reporter.event(
                Event::new(
                    kinds::STAGE_STARTED,
                    format!("stage {} started: {} steps", stage.name, stage.steps),
                )
                .with("stage", &stage.name)
                .with("steps", stage.steps)
                .with("samples", objective.len())
                .with("hard_examples", objective.hard_windows())
                .with("epochs", epochs),
            )?;
            let eval = objective.evaluate(&self.model);
            self.record_eval(stage, &eval, sampler.epoch_progress())?;
        }

        while self.progress.pos.stage_step < stage.steps {
            self.poll_save()?;
            if self.stop_requested() {
                return self.stop_now(stage, &objective, sampler.epoch_progress());
            }
            let lr = sched.lr(self.progress.pos.stage_step);
            self.model.params.zero_grad();
            let mut loss_sum = 0.0;
            let mut epoch_ended = false;
            for micro in 0..self.s.grad_accum {
                let idx: Vec<usize> = (0..self.s.batch_size)
                    .map(|_| {
                        let (i, ended) = sampler.next_index();
                        epoch_ended |= ended;
                        i
                    })
                    .collect();
                seed_torch(self.s.seed, self.progress.step, micro);
                loss_sum += objective.backward(
                    &self.model,
                    &idx,
                    self.device,
                    1.0 / self.s.grad_accum as f64,
                );
            }
            let loss = loss_sum / self.s.grad_accum as f64;
            if !loss.is_finite() {
                anyhow::bail!(
                    "the {} loss became {loss} at step {}; lower the stage's lr or optimizer.grad_clip and resume from the last checkpoint",
                    stage.name,
                    self.progress.step + 1
                );
            }
            let mut grad = self.model.params.flat_grad();
            let grad_norm = clip_grad_norm(&mut grad, self.s.grad_clip);
            self.opt.step(&self.model.params, &grad, lr);
            self.progress.step += 1;
            self.progress.pos.stage_step += 1;
            self.progress.pos.cursor = sampler.cursor();
            self.progress.last_loss = Some(loss);
            self.progress.last_lr = lr;
            let epoch = sampler.epoch_progress();

            self.history.append(&json!({
                "step": self.progress.step,
                "epoch": epoch,
                "learning_rate": lr,
                "loss": loss,
                "grad_norm": grad_norm,
                "stage": stage.name,
            }))?;
            self.reporter
                .step_done(self.progress.step, loss, lr, grad_norm);
            self.reporter.hb.epoch = Some(epoch);
            if self.reporter.hb.state != WorkerState::Training {
                self.reporter.set_state(WorkerState::Training)?;
            } else if self.progress.step.is_multiple_of(self.s.log_every) {
                self.history.flush()?;
                self.reporter.write()?;
            }

            let stage_done = self.progress.pos.stage_step == stage.steps;
            let due = self
                .progress
                .pos
                .stage_step
                .is_multiple_of(stage.checkpoint_every)
                || epoch_ended;
            // The last stage's end is saved as the `final-…` checkpoint instead.
            let save_now = (due || stage_done) && !(stage_done && last_stage);
            // A save is evaluated at its own step, whatever eval_every says: retention
            // keeps the best checkpoint by the validation loss it records.
            if self
                .progress
                .pos
                .stage_step
                .is_multiple_of(self.s.eval_every)
                || stage_done
                || save_now
            {
                let eval = objective.evaluate(&self.model);
                self.record_eval(stage, &eval, epoch)?;
            }
            if self.stop_at_step == Some(self.progress.step) {
                self.stop.store(true, Ordering::SeqCst);
            }
            if save_now {
                self.save(&stage.name, Some(stage.kind))?;
            }
        }

        let mut ev = Event::new(
            kinds::STAGE_FINISHED,
            format!(
                "stage {} finished at step {}",
                stage.name, self.progress.step
            ),
        )
        .with("stage", &stage.name)
        .with("step", self.progress.step)
        .with(stage.kind.loss_key(), self.progress.last_loss);
        if let Some(StepEval { eval, .. }) = &self.last_eval {
            ev = ev.with("eval_loss", eval.loss);
            for (k, v) in &eval.metrics {
                ev = ev.with(k, v);
            }
        }
        self.reporter.event(ev)?;
        Ok(Outcome::Finished)
    }

    fn stop_now(&mut self, stage: &Stage, objective: &Objective, epoch: f64) -> Result<Outcome> {
        // Nothing trained since the last save or load (or at all): nothing to save.
        if self.progress.step > 0 && self.progress.saved_step != Some(self.progress.step) {
            if self.evaluation_now().is_none() {
                let eval = objective.evaluate(&self.model);
                self.record_eval(stage, &eval, epoch)?;
            }
            self.save(&stage.name, Some(stage.kind))?;
        }
        // Exit only once the checkpoint is durable.
        self.finish_save()?;
        self.history.materialize()?;
        self.reporter.set_state(WorkerState::Stopping)?;
        Ok(Outcome::Stopped)
    }

    fn record_eval(&mut self, stage: &Stage, eval: &Eval, epoch: f64) -> Result<()> {
        let mut entry = json!({
            "step": self.progress.step,
            "epoch": epoch,
            "eval_loss": eval.loss,
            "stage": stage.name,
        });
        for (k, v) in &eval.metrics {
            entry[format!("eval_{k}")] = json!(v);
        }
        self.history.append(&entry)?;
        if stage.kind == StageKind::Pretrain
            && eval.loss.is_finite()
            && self.progress.best_val_loss.is_none_or(|b| eval.loss < b)
        {
            self.progress.best_val_loss = Some(eval.loss);
        }
        self.last_eval = Some(StepEval {
            step: self.progress.step,
            stage_index: self.progress.pos.stage_index,
            eval: eval.clone(),
        });
        Ok(())
    }

    /// The evaluation made at this step in this stage, if there was one.
    fn evaluation_now(&self) -> Option<&Eval> {
        self.last_eval
            .as_ref()
            .filter(|e| {
                e.step == self.progress.step && e.stage_index == self.progress.pos.stage_index
            })
            .map(|e| &e.eval)
    }

    /// The hard examples this run's pretraining mixes in. Decided when pretraining
    /// starts (and the windows copied into the run directory); a resume mid-stage reads
    /// the run's copy, so it mixes exactly what the interrupted session did.
    fn hard_examples(&mut self) -> Result<Option<crate::tokens::TokenArray>> {
        if self.progress.pos.stage_step == 0 {
            let choice = hard_examples::choose(&self.s.data_root, self.s.chunk, self.s.seq_len)?;
            let from = match &choice {
                hard_examples::Choice::Use { path, .. } => Some(path.as_path()),
                hard_examples::Choice::Skip(_) => None,
            };
            hard_examples::take(&self.run_dir, from)?;
            match choice {
                hard_examples::Choice::Use { chunk, .. } => {
                    eprintln!("pretrain: mixing in the hard examples mined on chunk {chunk}")
                }
                hard_examples::Choice::Skip(Some(why)) => {
                    eprintln!("pretrain: no hard examples mixed in: {why}")
                }
                hard_examples::Choice::Skip(None) => {}
            }
        }
        hard_examples::open(&self.run_dir, self.tokens.index.dtype)
    }

    fn reference_path(&self) -> PathBuf {
        self.run_dir.join(REFERENCE_FILE)
    }

    /// Keeps the DPO reference beside the run's checkpoints (once, not in each), tagged
    /// with the step it was taken at so a resume can check it is the right one.
    fn save_reference(&mut self, reference: &Gpt, taken_at: u64) -> Result<()> {
        let path = self.reference_path();
        let tmp = self.run_dir.join(format!(".{REFERENCE_FILE}.tmp"));
        let meta =
            std::collections::BTreeMap::from([(REFERENCE_STEP.to_string(), taken_at.to_string())]);
        crate::model::save_weights_with(reference, &tmp, meta)?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("could not sync {}", tmp.display()))?;
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("could not move {} into place", path.display()))?;
        lavender::atomic::sync_dir(&self.run_dir)?;
        self.reference_step = Some(taken_at);
        Ok(())
    }
}
