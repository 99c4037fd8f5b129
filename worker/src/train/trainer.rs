//! The training loop: stages in order, optimizer steps, evaluation, checkpoints,
//! and a stop flag checked at every step boundary.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use lavender::events::{Event, kind as kinds};
use lavender::heartbeat::WorkerState;
use serde_json::json;
use tch::Device;

use super::data::{Cursor, DpoData, PretrainData, Sampler, SftData, validation_batches};
use super::history::History;
use super::objective::{Eval, Objective};
use super::rng::seed_torch;
use super::settings::{Settings, Stage, StageKind};
use super::status::Reporter;
use crate::model::Gpt;
use crate::optim::{AdamW, LrSchedule, clip_grad_norm};
use crate::tokens::{Split, Tokens};

/// Where training stands: which stage, how far into it, and the data cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    pub stage_index: usize,
    pub stage_step: u64,
    pub cursor: Cursor,
    /// Every stage is done (resumed from a `final-…` checkpoint).
    pub finished: bool,
}

/// How a call to [`Trainer::run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Finished,
    Stopped,
}

pub struct Trainer {
    pub s: Settings,
    pub device: Device,
    pub run_dir: PathBuf,
    pub tokens: Tokens,
    pub shards: Vec<String>,
    pub model: Gpt,
    pub opt: AdamW,
    pub history: History,
    pub reporter: Reporter,
    pub stop: Arc<AtomicBool>,
    /// Test hook: behave as if SIGTERM arrived once this global step is done.
    pub stop_at_step: Option<u64>,
    /// Optimizer steps done over all stages.
    pub step: u64,
    pub pos: Position,
    pub best_val_loss: Option<f64>,
    /// The last pretraining validation loss (what retention's "best" compares).
    pub val_loss: Option<f64>,
    pub last_eval: Option<Eval>,
    pub last_loss: Option<f64>,
    pub last_lr: f64,
    /// The step of the newest checkpoint written or loaded (no byte-identical re-save).
    pub saved_step: Option<u64>,
    pub latest_checkpoint: Option<String>,
    /// Wall time of earlier sessions of this run (from the resumed checkpoint).
    pub wall_before: f64,
    pub started: Instant,
    /// The checkpoint being written in the background, if any (at most one).
    pub pending_save: Option<super::checkpointing::PendingSave>,
    /// Host memory for the next save's copy, back from the previous save's writer.
    pub save_buffers: Option<super::checkpointing::SaveBuffers>,
    /// Saves started by this process.
    pub saves_started: u32,
    /// Test hook: the writer of this save (1-based) never commits it.
    pub hold_save: Option<u32>,
    /// The frozen DPO reference, when resuming mid-DPO.
    pub reference: Option<Gpt>,
    /// The global step at which the current DPO reference was taken.
    pub reference_step: Option<u64>,
}

impl Trainer {
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub fn wall_time_s(&self) -> f64 {
        self.wall_before + self.started.elapsed().as_secs_f64()
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
        if !self.pos.finished {
            let stages = self.s.stages.clone();
            for (idx, stage) in stages.iter().enumerate() {
                if idx < self.pos.stage_index {
                    continue;
                }
                if idx > self.pos.stage_index {
                    self.pos = Position {
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
                        self.save_reference(&r, self.step)?;
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
        let mut sampler = Sampler::new(objective.len(), self.s.seed, &stage.name, self.pos.cursor);
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

        if self.pos.stage_step == 0 {
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

        while self.pos.stage_step < stage.steps {
            self.poll_save()?;
            if self.stop_requested() {
                return self.stop_now(stage);
            }
            let lr = sched.lr(self.pos.stage_step);
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
                seed_torch(self.s.seed, self.step, micro);
                let loss = objective.loss(&self.model, &idx, self.device);
                (&loss / self.s.grad_accum as f64).backward();
                loss_sum += loss.double_value(&[]);
            }
            let loss = loss_sum / self.s.grad_accum as f64;
            if !loss.is_finite() {
                anyhow::bail!(
                    "the {} loss became {loss} at step {}; lower the stage's lr or optimizer.grad_clip and resume from the last checkpoint",
                    stage.name,
                    self.step + 1
                );
            }
            let mut grad = self.model.params.flat_grad();
            let grad_norm = clip_grad_norm(&mut grad, self.s.grad_clip);
            self.opt.step(&self.model.params, &grad, lr);
            self.step += 1;
            self.pos.stage_step += 1;
            self.pos.cursor = sampler.cursor();
            self.last_loss = Some(loss);
            self.last_lr = lr;
            let epoch = sampler.epoch_progress();

            self.history.append(&json!({
                "step": self.step,
                "epoch": epoch,
                "learning_rate": lr,
                "loss": loss,
                "grad_norm": grad_norm,
                "stage": stage.name,
            }))?;
            self.reporter.step_done(self.step, loss, lr, grad_norm);
            self.reporter.hb.epoch = Some(epoch);
            if self.reporter.hb.state != WorkerState::Training {
                self.reporter.set_state(WorkerState::Training)?;
            } else if self.step.is_multiple_of(self.s.log_every) {
                self.history.flush()?;
                self.reporter.write()?;
            }

            let stage_done = self.pos.stage_step == stage.steps;
            if self.pos.stage_step.is_multiple_of(self.s.eval_every) || stage_done {
                let eval = objective.evaluate(&self.model);
                self.record_eval(stage, &eval, epoch)?;
            }
            if self.stop_at_step == Some(self.step) {
                self.stop.store(true, Ordering::SeqCst);
            }
            let due = self.pos.stage_step.is_multiple_of(stage.checkpoint_every) || epoch_ended;
            // The last stage's end is saved as the `final-…` checkpoint instead.
            if (due || stage_done) && !(stage_done && last_stage) {
                self.save(&stage.name, Some(stage.kind))?;
            }
        }

        let mut ev = Event::new(
            kinds::STAGE_FINISHED,
            format!("stage {} finished at step {}", stage.name, self.step),
        )
        .with("stage", &stage.name)
        .with("step", self.step)
        .with(stage.kind.loss_key(), self.last_loss);
        if let Some(eval) = &self.last_eval {
            ev = ev.with("eval_loss", eval.loss);
            for (k, v) in &eval.metrics {
                ev = ev.with(k, v);
            }
        }
        self.reporter.event(ev)?;
        Ok(Outcome::Finished)
    }

    fn stop_now(&mut self, stage: &Stage) -> Result<Outcome> {
        // Nothing trained since the last save or load (or at all): nothing to save.
        if self.step > 0 && self.saved_step != Some(self.step) {
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
            "step": self.step,
            "epoch": epoch,
            "eval_loss": eval.loss,
            "stage": stage.name,
        });
        for (k, v) in &eval.metrics {
            entry[format!("eval_{k}")] = json!(v);
        }
        self.history.append(&entry)?;
        if stage.kind == StageKind::Pretrain && eval.loss.is_finite() {
            self.val_loss = Some(eval.loss);
            if self.best_val_loss.is_none_or(|b| eval.loss < b) {
                self.best_val_loss = Some(eval.loss);
            }
        }
        self.last_eval = Some(eval.clone());
        Ok(())
    }

    /// The hard examples this run's pretraining mixes in. Decided when pretraining
    /// starts (and the windows copied into the run directory); a resume mid-stage reads
    /// the run's copy, so it mixes exactly what the interrupted session did.
    fn hard_examples(&mut self) -> Result<Option<crate::tokens::TokenArray>> {
        if self.pos.stage_step == 0 {
            let choice = super::hard::choose(&self.s.data_root, self.s.chunk, self.s.seq_len)?;
            let from = match &choice {
                super::hard::Choice::Use { path, .. } => Some(path.as_path()),
                super::hard::Choice::Skip(_) => None,
            };
            super::hard::take(&self.run_dir, from)?;
            match choice {
                super::hard::Choice::Use { chunk, .. } => {
                    eprintln!("pretrain: mixing in the hard examples mined on chunk {chunk}")
                }
                super::hard::Choice::Skip(Some(why)) => {
                    eprintln!("pretrain: no hard examples mixed in: {why}")
                }
                super::hard::Choice::Skip(None) => {}
            }
        }
        super::hard::open(&self.run_dir, self.tokens.index.dtype)
    }

    pub fn reference_path(&self) -> PathBuf {
        self.run_dir.join(super::checkpointing::REFERENCE_FILE)
    }

    /// Keeps the DPO reference beside the run's checkpoints (once, not in each), tagged
    /// with the step it was taken at so a resume can check it is the right one.
    pub fn save_reference(&mut self, reference: &Gpt, taken_at: u64) -> Result<()> {
        let path = self.reference_path();
        let tmp = self
            .run_dir
            .join(format!(".{}.tmp", super::checkpointing::REFERENCE_FILE));
        let meta = std::collections::BTreeMap::from([(
            super::checkpointing::REFERENCE_STEP.to_string(),
            taken_at.to_string(),
        )]);
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
