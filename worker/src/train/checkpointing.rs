//! The checkpoint as the worker writes and reads it, and loading one back for an
//! exact resume.
//!
//! A checkpoint directory holds `model.safetensors` (Hugging Face names),
//! `optimizer.safetensors` (`<param>.exp_avg` / `<param>.exp_avg_sq`, metadata step,
//! betas, eps, weight_decay; per `training.save_optimizer_state`), `ema.safetensors`
//! (the weights' moving average, with `training.ema`), `manifest.json` (each of
//! those files' size and BLAKE3 hash, from the bytes as they were written:
//! `lavender::checkpoint::contents`), and `trainer_state.json`, written last (with
//! fp16's loss scale under `loss_scaler`). The DPO reference model is kept once per
//! run as `dpo-reference.safetensors`, not in every checkpoint. Saving is the Trainer's
//! ([`super::trainer`]).

use std::path::Path;

use anyhow::{Context, Result, bail};
use lavender::checkpoint::Checkpoint;
use serde_json::Value;

use super::data::Cursor;
use super::divergence::DetectorState;
use super::precision::{LOSS_SCALER_KEY, LossScaler};
use super::settings::{Settings, StageKind};
use crate::failure::damaged_checkpoint;
use crate::model::{self, Gpt, MODEL_FILE};
use crate::optim::AdamW;
use crate::optim::adamw::OPTIMIZER_FILE;

pub const REFERENCE_FILE: &str = lavender::run::DPO_REFERENCE_FILE;
/// Metadata key (in the reference file) and trainer_state key naming the step at
/// which the DPO reference was taken.
pub const REFERENCE_STEP: &str = "dpo_reference_step";
pub const FINAL_STAGE: &str = "final";
/// data_cursor key: steps' worth of batches still to skip at the next stages' start.
pub const SKIP_STEPS: &str = "skip_steps";
/// trainer_state key: the divergence detector's state.
pub const DIVERGENCE: &str = "divergence";

/// Where training stands: which stage, how far into it, and the data cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    pub stage_index: usize,
    pub stage_step: u64,
    pub cursor: Cursor,
    /// Every stage is done (resumed from a `final-…` checkpoint).
    pub finished: bool,
}

/// The Trainer's resumable state: what a checkpoint restores besides the weights,
/// the optimizer's moments and the DPO reference. A resume assigns it whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Optimizer steps done over all stages.
    pub step: u64,
    pub pos: Position,
    /// The lowest pretraining validation loss so far.
    pub best_val_loss: Option<f64>,
    pub last_loss: Option<f64>,
    pub last_lr: f64,
    /// Wall time of earlier sessions of this run.
    pub wall_before: f64,
    /// The step of the newest checkpoint written or loaded (no byte-identical re-save).
    pub saved_step: Option<u64>,
    /// The name of the newest checkpoint written or loaded.
    pub latest_checkpoint: Option<String>,
    /// Optimizer steps' worth of batches to skip at the start of the next stage
    /// (`<run>/skipped.json`): what a range skips beyond the stage it was applied
    /// in; what exceeds that stage's steps carries on to the one after.
    pub skip_steps: u64,
    /// How many ranges of `<run>/skipped.json` the data cursor includes.
    pub skips_applied: usize,
    /// fp16's loss scale (none in other precisions).
    pub loss_scaler: Option<LossScaler>,
}

/// What loading a checkpoint gives besides the weights and moments it loaded.
pub struct Resumed {
    pub progress: Progress,
    /// The frozen DPO reference, when the checkpoint is mid-DPO.
    pub reference: Option<Gpt>,
    pub reference_step: Option<u64>,
    /// Training continues a previous chunk's weights from step 0 of this chunk.
    pub new_chunk: bool,
    pub optimizer_loaded: bool,
    /// The divergence detector's state, when training continues mid-stage.
    pub divergence: Option<DetectorState>,
}

/// The chunk a checkpoint was trained on, when it says.
pub fn chunk_of(ck: &Checkpoint) -> Option<u64> {
    let st = &ck.state;
    st.extra
        .get("chunk")
        .or_else(|| st.data_cursor.get("chunk"))
        .and_then(Value::as_u64)
}

/// Refuses to resume `ck` with another tokenizer than the one its run trained with
/// (its run's `tokenizer.json`): the same ids would mean other text. Only the
/// vocabulary, the merges and the added tokens count, not the file's formatting.
pub fn check_tokenizer(ck: &Checkpoint, current: &[u8]) -> Result<()> {
    let Some(theirs_path) = ck
        .path
        .parent()
        .map(|run| run.join(crate::tokens::TOKENIZER_FILE))
    else {
        return Ok(());
    };
    let Ok(theirs) = std::fs::read(&theirs_path) else {
        // A run without its tokenizer (not lavender-worker's): nothing to compare.
        return Ok(());
    };
    let essence = |bytes: &[u8]| {
        serde_json::from_slice::<Value>(bytes)
            .ok()
            .map(|v| (v.get("model").cloned(), v.get("added_tokens").cloned()))
    };
    let same = match (essence(&theirs), essence(current)) {
        (Some(a), Some(b)) => a == b,
        _ => theirs == current,
    };
    if !same {
        bail!(
            "checkpoint {} was trained with the tokenizer {}, which differs from the current tokens/ one; resume it with the data it was trained on, or start a new run without --resume",
            ck.path.display(),
            theirs_path.display()
        );
    }
    Ok(())
}

/// Loads `ck` into `model` and `opt` and works out where training resumes.
pub fn load(ck: &Checkpoint, s: &Settings, model: &mut Gpt, opt: &mut AdamW) -> Result<Resumed> {
    // A file of the checkpoint that cannot be read is a damaged checkpoint; one that
    // reads but does not fit stays incompatible (the caller's tag).
    model::load_weights(model, &ck.path.join(MODEL_FILE))
        .map_err(damaged_checkpoint)
        .with_context(|| {
            format!(
                "could not load the weights of checkpoint {}",
                ck.path.display()
            )
        })?;
    let opt_file = ck.path.join(OPTIMIZER_FILE);
    let optimizer_loaded = opt_file.exists();
    if optimizer_loaded {
        opt.load(&model.params, &opt_file)
            .map_err(damaged_checkpoint)
            .with_context(|| {
                format!(
                    "could not load the optimizer state of checkpoint {}",
                    ck.path.display()
                )
            })?;
    }
    let st = &ck.state;
    let ck_chunk = chunk_of(ck);
    let loss_scaler = st
        .extra
        .get(LOSS_SCALER_KEY)
        .map(LossScaler::from_json)
        .transpose()
        .with_context(|| format!("checkpoint {} has a bad loss scale", ck.path.display()))?;
    let mut r = Resumed {
        progress: Progress {
            step: st.step,
            pos: Position::default(),
            best_val_loss: st.best_val_loss,
            last_loss: st.loss,
            last_lr: st.lr,
            wall_before: st.wall_time_s,
            saved_step: Some(st.step),
            latest_checkpoint: Some(ck.name.clone()),
            skip_steps: st
                .data_cursor
                .get(SKIP_STEPS)
                .and_then(Value::as_u64)
                .unwrap_or(0),
            skips_applied: lavender::skips::applied(st),
            loss_scaler,
        },
        reference: None,
        reference_step: None,
        new_chunk: false,
        optimizer_loaded,
        divergence: None,
    };
    if ck_chunk.is_some_and(|c| c != s.chunk as u64) {
        // Steps, wall time and saves start again in the new chunk's run.
        r.progress.step = 0;
        r.progress.wall_before = 0.0;
        r.progress.saved_step = None;
        r.progress.skip_steps = 0;
        r.progress.skips_applied = 0;
        r.new_chunk = true;
        return Ok(r);
    }
    if st.stage == FINAL_STAGE {
        r.progress.pos.finished = true;
        return Ok(r);
    }
    let Some(stage_index) = s.stages.iter().position(|x| x.name == st.stage) else {
        let names: Vec<&str> = s.stages.iter().map(|x| x.name.as_str()).collect();
        bail!(
            "checkpoint {} is from stage {:?}, which training.stages ({}) does not have",
            ck.path.display(),
            st.stage,
            names.join(", ")
        );
    };
    let cursor = Cursor {
        epoch: st
            .data_cursor
            .get("epoch")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        index: st
            .data_cursor
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    };
    r.progress.pos = Position {
        stage_index,
        stage_step: st.stage_step,
        cursor,
        finished: false,
    };
    let stage = &s.stages[stage_index];
    if st.stage_step >= stage.steps {
        // The stage was complete: the next one starts afresh.
        r.progress.pos = Position {
            stage_index: stage_index + 1,
            ..Position::default()
        };
        return Ok(r);
    }
    r.divergence = st
        .extra
        .get(DIVERGENCE)
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    if stage.kind == StageKind::Dpo && st.stage_step > 0 {
        let want = st.extra.get(REFERENCE_STEP).and_then(Value::as_u64);
        let run = ck.path.parent().unwrap_or(Path::new("."));
        let path = run.join(REFERENCE_FILE);
        let mut reference = model.frozen_copy();
        if !path.is_file() {
            return Err(crate::failure::tag(
                anyhow::anyhow!(
                    "checkpoint {} is mid-DPO and needs its run's reference model {}, which is not there",
                    ck.path.display(),
                    path.display()
                ),
                lavender::failure::FailureKind::MissingRunFile,
            ));
        }
        let meta = model::load_weights(&mut reference, &path).with_context(|| {
            format!(
                "checkpoint {} is mid-DPO and needs its reference model {}",
                ck.path.display(),
                path.display()
            )
        })?;
        let have = meta.get(REFERENCE_STEP).and_then(|v| v.parse::<u64>().ok());
        if want.is_some() && have != want {
            bail!(
                "{} was taken at step {have:?}, but checkpoint {} needs the reference from step {want:?}; resume from a checkpoint before DPO started",
                path.display(),
                ck.path.display()
            );
        }
        r.reference = Some(reference);
        r.reference_step = want;
    }
    Ok(r)
}
