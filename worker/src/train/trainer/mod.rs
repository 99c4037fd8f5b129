//! The training loop: stages in order, optimizer steps, evaluation, checkpoints,
//! and a stop flag checked at every step boundary.

mod in_flight;
mod save;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use lavender::checkpoint::Checkpoint;
use lavender::config::SaveOptimizerState;
use lavender::events::{Event, kind as kinds};
use lavender::failure::FailureKind;
use lavender::heartbeat::WorkerState;
use serde_json::json;
use tch::{Device, Tensor};

use super::checkpointing::{Position, Progress, REFERENCE_FILE, REFERENCE_STEP, Resumed};
use super::data::{DpoData, PretrainData, Sampler, SftData, validation_batches};
use super::divergence::Detector;
use super::ema::{EMA_FILE, Ema};
use super::history::History;
use super::objective::{Eval, Objective};
use super::precision::Precision;
use super::rng::seed_torch;
use super::settings::{Settings, Stage, StageKind};
use super::staging::BatchStager;
use super::status::Reporter;
use crate::failure::{self, KindExt};
use crate::hard_examples;
use crate::model::Gpt;
use crate::optim::{AdamW, LrSchedule, clip_grad_norm};
use crate::tokens::{Split, Tokens};
use in_flight::{NextBuffers, PendingSave, SaveBuffers};

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
    /// `training.precision` resolved for `device`.
    pub precision: Precision,
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
    /// Test hook: hang for ever once this global step is done.
    #[cfg(feature = "test-hooks")]
    pub hang_at_step: Option<u64>,
    /// Test hook: the piece of state a resume forgets (`cursor` or `rng`).
    #[cfg(feature = "test-hooks")]
    pub forget_on_resume: Option<String>,
    /// When this process started, for the run's wall time.
    pub started: Instant,
}

/// An evaluation and where it was made: a checkpoint's validation loss is the one
/// measured at its own step, in its own stage.
#[derive(Debug, Clone)]
struct TrainStepEval {
    step: u64,
    stage_index: usize,
    eval: Eval,
    /// The EMA weights' evaluation on the same batches (`training.ema`).
    ema: Option<Eval>,
}

/// An optimizer step whose loss and gradient norm are still on the device: they are
/// read, with those of the steps before, at the next log step, evaluation or save.
struct PendingTrainStep {
    step: u64,
    stage: String,
    epoch: f64,
    lr: f64,
    /// `[loss, grad_norm]`, f64, on the device.
    values: Tensor,
    /// fp16: the loss scale of the step, and whether its gradient overflowed (the
    /// optimizer skipped it).
    loss_scale: Option<(f64, bool)>,
}

pub struct Trainer {
    s: Settings,
    device: Device,
    precision: Precision,
    /// The weights' moving average (`training.ema`).
    ema: Option<Ema>,
    /// Steps whose values are still on the device, oldest first.
    pending_steps: Vec<PendingTrainStep>,
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
    #[cfg(feature = "test-hooks")]
    hang_at_step: Option<u64>,
    #[cfg(feature = "test-hooks")]
    forget_on_resume: Option<String>,
    /// Test hook (`forget_on_resume: rng`): the step the random state counts from.
    #[cfg(feature = "test-hooks")]
    rng_base: u64,
    started: Instant,
    /// What a checkpoint restores: step, position, losses, wall time, latest save.
    progress: Progress,
    /// The latest evaluation (not restored: the next save evaluates at its own step).
    last_eval: Option<TrainStepEval>,
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
    /// Judges every step's loss and gradient norm (`training.spike`).
    divergence: Detector,
    /// Steps' worth of batches to skip from where a resume stands, in its stage.
    skip_here: u64,
}

impl Trainer {
    /// A trainer at step 0 of the first stage; [`Trainer::resume_from`] moves it to
    /// where a checkpoint left off.
    pub fn new(p: Parts) -> Trainer {
        let ema = p.s.config.training.ema.map(|cfg| Ema::new(cfg, &p.model));
        let save_buffers = SaveBuffers::prepare(
            p.model.params.numel(),
            p.s.save_optimizer_state != SaveOptimizerState::None,
            ema.is_some(),
        );
        let divergence = Detector::new(p.s.spike, 0);
        let progress = Progress {
            loss_scaler: p.precision.loss_scaler(),
            ..Progress::default()
        };
        Trainer {
            s: p.s,
            device: p.device,
            precision: p.precision,
            ema,
            pending_steps: Vec::new(),
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
            #[cfg(feature = "test-hooks")]
            hang_at_step: p.hang_at_step,
            #[cfg(feature = "test-hooks")]
            forget_on_resume: p.forget_on_resume,
            #[cfg(feature = "test-hooks")]
            rng_base: 0,
            started: p.started,
            progress,
            last_eval: None,
            pending_save: None,
            save_buffers,
            saves_started: 0,
            reference: None,
            reference_step: None,
            divergence,
            skip_here: 0,
        }
    }

    /// Continues from `ck`, whose weights and moments are loaded already: restores
    /// its progress and DPO reference and reports the load (`checkpoint_loaded`).
    pub fn resume_from(&mut self, ck: &Checkpoint, r: Resumed) -> Result<()> {
        self.progress = r.progress;
        #[cfg(feature = "test-hooks")]
        match self.forget_on_resume.as_deref() {
            Some("cursor") => self.progress.pos.cursor.index = 0,
            Some("rng") => self.rng_base = self.progress.step,
            _ => {}
        }
        // Mid-stage, the steps after the checkpoint are judged as they were before.
        self.divergence = match r.divergence {
            Some(state) => Detector::restore(self.s.spike, state, self.progress.step),
            None => Detector::new(self.s.spike, self.progress.step),
        };
        // fp16 continues the checkpoint's loss scale (a fresh one if it trained in
        // another precision); other precisions have none.
        self.progress.loss_scaler = match self.precision.loss_scaler() {
            Some(fresh) => Some(self.progress.loss_scaler.unwrap_or(fresh)),
            None => None,
        };
        if let Some(ema) = &mut self.ema {
            let file = ck.path.join(EMA_FILE);
            if file.is_file() {
                ema.load(&file)
                    .map_err(crate::failure::damaged_checkpoint)
                    .with_context(|| {
                        format!(
                            "could not load the EMA weights of checkpoint {}",
                            ck.path.display()
                        )
                    })?;
            } else {
                ema.reset(&self.model);
                if self.progress.pos.stage_step > 0 {
                    eprintln!(
                        "warning: checkpoint {} has no {EMA_FILE}; the moving average starts again from its weights",
                        ck.path.display()
                    );
                }
            }
        }
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

    /// Leaves the phase (`loading`, `evaluating`, `saving`) the heartbeat says.
    pub fn end_phase(&mut self) -> Result<()> {
        self.reporter.end_phase()
    }

    /// Judges a step's loss and gradient norm (in step order, once they reach the
    /// host, and always before a save): a divergence ends training with a
    /// `diverged` error, before anything of this state is saved.
    fn judge_step(&mut self, step: u64, loss: f64, grad_norm: f64) -> Result<()> {
        match self.divergence.observe(step, loss, grad_norm) {
            None => Ok(()),
            Some(d) => {
                eprintln!(
                    "diverged: {}; nothing saved since step {:?} (lavenderd rolls back to a checkpoint before step {})",
                    d.message, self.progress.saved_step, d.since_step
                );
                Err(failure::diverged(
                    format!(
                        "training diverged: {}; resume from a checkpoint before step {}, or lower the stage's lr",
                        d.message, d.since_step
                    ),
                    d.step,
                    d.since_step,
                ))
            }
        }
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
        if outcome.is_err() && self.pending_save.is_some() {
            // A save of an earlier state still completes (a divergence's is pre-spike
            // or judged by the daemon); best effort, the error is what matters.
            let _ = self.reporter.phase(WorkerState::Saving);
        }
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
                    .collect::<Result<Vec<_>>>()
                    .kind(FailureKind::Data)?;
                let mut data = PretrainData::new(arrays, seq).kind(FailureKind::Data)?;
                if let Some(hard) = self.hard_examples().kind(FailureKind::Data)? {
                    data.add_windows(hard);
                }
                let val = self.tokens.pretrain_validation().kind(FailureKind::Data)?;
                Objective::Pretrain {
                    eval: validation_batches(&val, seq, bs, nb, dev).kind(FailureKind::Data)?,
                    data,
                }
            }
            StageKind::Sft => {
                let sets = (
                    self.tokens.sft(Split::Train),
                    self.tokens.sft(Split::Heldout),
                );
                let data = SftData::new(sets.0.kind(FailureKind::Data)?, seq, "training")
                    .kind(FailureKind::Data)?;
                let held = SftData::new(sets.1.kind(FailureKind::Data)?, seq, "held-out")
                    .kind(FailureKind::Data)?;
                let n = held.len().min(bs * nb);
                let idx: Vec<usize> = (0..n).collect();
                Objective::Sft {
                    eval: idx.chunks(bs).map(|c| held.batch(c, dev)).collect(),
                    data,
                }
            }
            StageKind::Dpo => {
                let sets = (
                    self.tokens.dpo(Split::Train),
                    self.tokens.dpo(Split::Heldout),
                );
                let data = DpoData::new(sets.0.kind(FailureKind::Data)?, seq, "training")
                    .kind(FailureKind::Data)?;
                let held = DpoData::new(sets.1.kind(FailureKind::Data)?, seq, "held-out")
                    .kind(FailureKind::Data)?;
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
        self.reporter.phase(WorkerState::Loading)?;
        let objective = self.objective(stage)?;
        let mut sampler = Sampler::new(
            objective.len(),
            self.s.seed,
            &stage.name,
            self.progress.pos.cursor,
        );
        let per_step = self.s.batch_size as u64 * self.s.grad_accum;
        self.skip_batches(stage, &mut sampler, per_step);
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
        let mut stager = BatchStager::new(
            self.device,
            objective.rows_per_batch(self.s.batch_size) * self.s.seq_len,
        )?;

        if self.progress.pos.stage_step == 0 {
            // Another stage's loss is on another scale: its spikes are judged afresh.
            self.divergence.reset();
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
            if let Some(ema) = &mut self.ema {
                ema.reset(&self.model);
            }
            self.evaluate(stage, &objective, sampler.epoch_progress())?;
        }
        self.reporter.end_phase()?;

        while self.progress.pos.stage_step < stage.steps {
            self.poll_save()?;
            if self.stop_requested() {
                return self.stop_now(stage, &objective, sampler.epoch_progress());
            }
            let lr = sched.lr(self.progress.pos.stage_step);
            self.model.params.zero_grad();
            let mut epoch_ended = false;
            let accum = self.s.grad_accum;
            // fp16 computes the gradient of scale × loss, so small ones do not underflow.
            let loss_scale = self.progress.loss_scaler.map(|l| l.scale());
            let grad_factor = loss_scale.unwrap_or(1.0) / accum as f64;
            let loss = {
                let _autocast = self.precision.autocast(self.device)?;
                let mut sum: Option<Tensor> = None;
                for micro in 0..accum {
                    let idx: Vec<usize> = (0..self.s.batch_size)
                        .map(|_| {
                            let (i, ended) = sampler.next_index();
                            epoch_ended |= ended;
                            i
                        })
                        .collect();
                    #[cfg(feature = "test-hooks")]
                    let rng_step = self.progress.step - self.rng_base;
                    #[cfg(not(feature = "test-hooks"))]
                    let rng_step = self.progress.step;
                    seed_torch(self.s.seed, rng_step, micro);
                    let batch = stager.stage(&objective.rows(&idx))?;
                    let loss = objective.backward(&self.model, &batch, grad_factor);
                    sum = Some(match sum {
                        Some(s) => s + loss,
                        None => loss,
                    });
                }
                sum.expect("training.grad_accum is at least 1") / accum as f64
            };
            let mut grad = self.model.params.flat_grad();
            if let Some(scale) = loss_scale {
                let _ = grad.g_mul_scalar_(1.0 / scale);
            }
            let grad_norm = clip_grad_norm(&mut grad, self.s.grad_clip);
            // fp16 skips a step whose gradient overflowed; knowing that takes a read
            // from the device, as torch.amp.GradScaler's step does.
            let applied = match &mut self.progress.loss_scaler {
                Some(scaler) => scaler.update(grad_norm.isfinite().int64_value(&[]) != 0),
                None => true,
            };
            if applied {
                self.opt.step(&self.model.params, &grad, lr);
            }
            self.progress.step += 1;
            self.progress.pos.stage_step += 1;
            self.progress.pos.cursor = sampler.cursor();
            self.progress.last_lr = lr;
            if let Some(ema) = &mut self.ema {
                ema.after_step(&self.model, self.progress.pos.stage_step);
            }
            let epoch = sampler.epoch_progress();
            self.pending_steps.push(PendingTrainStep {
                step: self.progress.step,
                stage: stage.name.clone(),
                epoch,
                lr,
                values: Tensor::stack(&[loss, grad_norm], 0),
                loss_scale: loss_scale.map(|s| (s, !applied)),
            });
            self.reporter.hb.epoch = Some(epoch);
            if self.reporter.hb.state != WorkerState::Training {
                self.flush_steps()?;
                self.reporter.set_state(WorkerState::Training)?;
            } else if self.progress.step.is_multiple_of(self.s.log_every) {
                self.flush_steps()?;
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
            let evaluate_now = self
                .progress
                .pos
                .stage_step
                .is_multiple_of(self.s.eval_every)
                || stage_done
                || save_now;
            if evaluate_now {
                self.evaluate(stage, &objective, epoch)?;
            }
            if self.stop_at_step == Some(self.progress.step) {
                self.stop.store(true, Ordering::SeqCst);
            }
            #[cfg(feature = "test-hooks")]
            if self.hang_at_step == Some(self.progress.step) {
                hung_in_test_hook();
            }
            if save_now {
                self.save(&stage.name, Some(stage.kind))?;
            }
            // A stop goes on saving, then stopping.
            if (evaluate_now || save_now) && !self.stop_requested() {
                self.reporter.end_phase()?;
            }
        }

        self.flush_steps()?;
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
        if let Some(TrainStepEval { eval, ema, .. }) = &self.last_eval {
            ev = ev.with("eval_loss", eval.loss);
            for (k, v) in &eval.metrics {
                ev = ev.with(k, v);
            }
            if let Some(ema) = ema {
                ev = ev.with("ema_eval_loss", ema.loss);
            }
        }
        self.reporter.event(ev)?;
        Ok(Outcome::Finished)
    }

    fn stop_now(&mut self, stage: &Stage, objective: &Objective, epoch: f64) -> Result<Outcome> {
        // Nothing trained since the last save or load (or at all): nothing to save.
        if self.progress.step > 0 && self.progress.saved_step != Some(self.progress.step) {
            if self.evaluation_now().is_none() {
                self.evaluate(stage, objective, epoch)?;
            }
            self.save(&stage.name, Some(stage.kind))?;
        }
        // Exit only once the checkpoint is durable.
        self.finish_save()?;
        self.history.materialize()?;
        self.reporter.set_state(WorkerState::Stopping)?;
        Ok(Outcome::Stopped)
    }

    /// Reads `<run>/skipped.json` when training starts or resumes: the ranges that
    /// apply to where it stands (`lavender::skips`) add to the batches to skip.
    pub fn plan_skips(&mut self) -> Result<()> {
        let skips = lavender::skips::read(&self.run_dir).kind(FailureKind::Data)?;
        let ranges: Vec<_> = skips
            .to_apply(self.progress.step, self.progress.skips_applied)
            .collect();
        let steps: u64 = ranges.iter().map(|r| r.steps()).sum();
        if !ranges.is_empty() {
            let message = format!(
                "skipping the data of {steps} step(s) after step {} ({} rollback range(s) in {})",
                self.progress.step,
                ranges.len(),
                lavender::skips::FILE
            );
            eprintln!("{message}");
            self.reporter.event(
                Event::new(kinds::DATA_SKIPPED, message)
                    .with("step", self.progress.step)
                    .with("steps", steps)
                    .with("ranges", &ranges),
            )?;
        }
        // The batches of this stage's remaining steps first, the rest at the next
        // stage's start (a resume at a stage's start skips it all there).
        let pos = self.progress.pos;
        let remaining = match self.s.stages.get(pos.stage_index) {
            Some(stage) if !pos.finished && pos.stage_step > 0 => {
                stage.steps.saturating_sub(pos.stage_step)
            }
            _ => 0,
        };
        self.skip_here = steps.min(remaining);
        self.progress.skip_steps += steps - self.skip_here;
        // Every range of the record is now either in the cursor or another line's.
        self.progress.skips_applied = skips.ranges.len();
        Ok(())
    }

    /// Passes `sampler` over the batches to skip in this stage: at its start, those
    /// carried over from the previous one; on a resume, those after where it stands.
    fn skip_batches(&mut self, stage: &Stage, sampler: &mut Sampler, per_step: u64) {
        let mut steps = std::mem::take(&mut self.skip_here);
        if self.progress.pos.stage_step == 0 {
            let carried = self.progress.skip_steps.min(stage.steps);
            self.progress.skip_steps -= carried;
            steps += carried;
        }
        if steps > 0 {
            sampler.skip(steps * per_step);
            self.progress.pos.cursor = sampler.cursor();
        }
    }

    /// Reads the losses and gradient norms of the steps since the last read from the
    /// device, all in one copy, and records them (log_history, the heartbeat's
    /// values). Called at log steps and before every evaluation, save and stage end,
    /// so each step's values reach the host, late but all of them, before anything
    /// that depends on them is written.
    fn flush_steps(&mut self) -> Result<()> {
        if self.pending_steps.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending_steps);
        let stacked = Tensor::stack(&pending.iter().map(|p| &p.values).collect::<Vec<_>>(), 0);
        let values = Vec::<f64>::try_from(stacked.to_device(Device::Cpu).view([-1]))
            .context("could not read the steps' losses from the device")?;
        for (p, v) in pending.iter().zip(values.chunks_exact(2)) {
            let (loss, grad_norm) = (v[0], v[1]);
            let skipped = p.loss_scale.is_some_and(|(_, skipped)| skipped);
            let mut entry = json!({
                "step": p.step,
                "epoch": p.epoch,
                "learning_rate": p.lr,
                "loss": loss,
                "grad_norm": grad_norm,
                "stage": p.stage,
            });
            if let Some((scale, skipped)) = p.loss_scale {
                entry["loss_scale"] = json!(scale);
                if skipped {
                    entry["skipped"] = json!(true);
                }
            }
            self.history.append(&entry)?;
            self.reporter.step_done(p.step, loss, p.lr, grad_norm);
            self.progress.last_loss = Some(loss);
            if skipped {
                // fp16 skipped the step (its gradient overflowed): the loss scale's
                // business, not a divergence.
                self.divergence.pass(p.step);
            } else {
                self.judge_step(p.step, loss, grad_norm)?;
            }
        }
        Ok(())
    }

    /// Evaluates the weights (and their moving average) at this step, under the
    /// training's autocast, and records it.
    fn evaluate(&mut self, stage: &Stage, objective: &Objective, epoch: f64) -> Result<()> {
        // The steps before it come first in log_history.
        self.flush_steps()?;
        self.reporter.phase(WorkerState::Evaluating)?;
        let (eval, ema) = {
            let _autocast = self.precision.autocast(self.device)?;
            let eval = objective.evaluate(&self.model);
            (
                eval,
                self.ema.as_ref().map(|e| objective.evaluate(e.model())),
            )
        };
        self.record_eval(stage, &eval, ema, epoch)
    }

    fn record_eval(
        &mut self,
        stage: &Stage,
        eval: &Eval,
        ema: Option<Eval>,
        epoch: f64,
    ) -> Result<()> {
        let mut entry = json!({
            "step": self.progress.step,
            "epoch": epoch,
            "eval_loss": eval.loss,
            "stage": stage.name,
        });
        for (k, v) in &eval.metrics {
            entry[format!("eval_{k}")] = json!(v);
        }
        if let Some(ema) = &ema {
            entry["eval_ema_loss"] = json!(ema.loss);
            for (k, v) in &ema.metrics {
                entry[format!("eval_ema_{k}")] = json!(v);
            }
        }
        self.history.append(&entry)?;
        if stage.kind == StageKind::Pretrain
            && eval.loss.is_finite()
            && self.progress.best_val_loss.is_none_or(|b| eval.loss < b)
        {
            self.progress.best_val_loss = Some(eval.loss);
        }
        self.last_eval = Some(TrainStepEval {
            step: self.progress.step,
            stage_index: self.progress.pos.stage_index,
            eval: eval.clone(),
            ema,
        });
        Ok(())
    }

    /// The evaluation made at this step in this stage, if there was one.
    fn evaluation_now(&self) -> Option<&Eval> {
        self.step_evaluation_now().map(|e| &e.eval)
    }

    fn step_evaluation_now(&self) -> Option<&TrainStepEval> {
        self.last_eval.as_ref().filter(|e| {
            e.step == self.progress.step && e.stage_index == self.progress.pos.stage_index
        })
    }

    /// The hard examples this run's pretraining mixes in. Decided when pretraining
    /// starts (and the windows copied into the run directory); a resume mid-stage reads
    /// the run's copy, so it mixes exactly what the interrupted session did.
    fn hard_examples(&mut self) -> Result<Option<crate::tokens::TokenArray>> {
        if self.progress.pos.stage_step == 0 {
            let choice = hard_examples::choose(&self.s.data_root, self.s.chunk, self.s.seq_len)?;
            let from: Vec<PathBuf> = choice.used.iter().map(|(p, _)| p.clone()).collect();
            hard_examples::take(&self.run_dir, &from)?;
            if !choice.used.is_empty() {
                let chunks: Vec<String> = choice.used.iter().map(|(_, c)| c.to_string()).collect();
                eprintln!(
                    "pretrain: mixing in the hard examples mined on chunk(s) {}",
                    chunks.join(", ")
                );
            }
            for why in &choice.skipped {
                eprintln!("pretrain: hard examples not mixed in: {why}");
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

/// Test hook (`--hang-at-step`): a hang in a place a stack names. Never inlined, so
/// the frame keeps its symbol.
#[cfg(feature = "test-hooks")]
#[inline(never)]
fn hung_in_test_hook() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::hint::black_box(());
    }
}
