//! Saving checkpoints through the core library's `CheckpointBuilder`, and loading
//! them back for an exact resume.
//!
//! A checkpoint directory holds `model.safetensors` (Hugging Face names),
//! `optimizer.safetensors` (`<param>.exp_avg` / `<param>.exp_avg_sq`, metadata step,
//! betas, eps, weight_decay; per `training.save_optimizer_state`), and
//! `trainer_state.json`, written last by the builder. The DPO reference model is
//! kept once per run as `dpo-reference.safetensors`, not in every checkpoint.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use lavender::atomic::CheckpointBuilder;
use lavender::checkpoint::{self, Checkpoint, CheckpointName};
use lavender::config::SaveOptimizerState;
use lavender::events::{Event, kind as kinds};
use lavender::heartbeat::WorkerState;
use lavender::trainer_state::TrainerState;
use lavender::trainlog;
use serde_json::{Value, json};

use super::data::Cursor;
use super::settings::{Settings, StageKind};
use super::trainer::{Position, Trainer};
use crate::model::{self, Gpt, MODEL_FILE};
use crate::optim::AdamW;
use crate::optim::adamw::OPTIMIZER_FILE;

pub const REFERENCE_FILE: &str = "dpo-reference.safetensors";
/// Metadata key (in the reference file) and trainer_state key naming the step at
/// which the DPO reference was taken.
pub const REFERENCE_STEP: &str = "dpo_reference_step";
pub const FINAL_STAGE: &str = "final";
const RNG_SCHEME: &str = "stateless: data order from (seed, stage, epoch), dropout reseeded from (seed, step, micro-batch)";

impl Trainer {
    /// Saves a checkpoint named after `stage`; runs retention and reports it.
    pub fn save(&mut self, stage: &str, kind: Option<StageKind>) -> Result<PathBuf> {
        self.reporter.set_state(WorkerState::Saving)?;
        let now = lavender::time::now_utc();
        let counter = checkpoint::next_counter(&self.run_dir)?;
        let name = CheckpointName::new(stage, now.time(), counter)?;
        let builder = CheckpointBuilder::begin(&self.run_dir, &name)?;
        model::save_weights(&self.model, &builder.dir().join(MODEL_FILE))?;
        let with_optimizer = self.s.save_optimizer_state != SaveOptimizerState::None;
        if with_optimizer {
            self.opt
                .save(&self.model.params, &builder.dir().join(OPTIMIZER_FILE))?;
        }
        // Complete before the checkpoint it belongs to becomes visible.
        self.history.materialize()?;
        let state = self.trainer_state(stage, with_optimizer);
        let path = builder.commit(&state)?;
        let name = name.to_string();
        if self.s.save_optimizer_state == SaveOptimizerState::Last {
            drop_older_optimizer_state(&self.run_dir, &path)?;
        }
        trainlog::log_save(&self.run_dir, &name, now)?;
        let dropped = checkpoint::enforce_retention(&self.run_dir, self.s.keep_checkpoints)?;
        trainlog::log_retain(&self.run_dir, dropped.len())?;
        if !dropped.is_empty() {
            let names: Vec<String> = dropped
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
        self.saved_step = Some(self.step);
        self.latest_checkpoint = Some(name.clone());
        self.reporter.hb.latest_checkpoint = Some(name.clone());

        let epochs = self.reporter.hb.epochs;
        let epoch = self.reporter.hb.epoch.unwrap_or(0.0);
        let hours = self.reporter.remaining_hours();
        let mut message = format!("checkpoint saved: {name}");
        if let Some(n) = epochs {
            message.push_str(&format!(
                ", epoch {}/{n}",
                (epoch.floor() as u64 + 1).min(n as u64)
            ));
        }
        if let (Some(k), Some(l)) = (kind, self.last_loss) {
            message.push_str(&format!(
                ", {} {l:.3}",
                k.loss_key().trim_end_matches("_loss").to_uppercase()
            ));
        }
        if let Some(h) = hours {
            message.push_str(&format!(", ETA {h:.1}h"));
        }
        let mut ev = Event::new(kinds::CHECKPOINT_SAVED, message)
            .with("name", &name)
            .with("path", &path)
            .with("step", self.step)
            .with("stage", stage)
            .with("epoch", epoch)
            .with("epochs", epochs)
            .with("remaining_hours", hours);
        if let Some(k) = kind {
            ev = ev.with(k.loss_key(), self.last_loss);
        }
        self.reporter.event(ev)?;
        if !self.stop_requested() {
            self.reporter.set_state(WorkerState::Training)?;
        }
        Ok(path)
    }

    /// The `final-…` checkpoint after the last stage.
    pub fn save_final(&mut self) -> Result<()> {
        let kind = self.s.stages.last().map(|s| s.kind);
        let path = self.save(FINAL_STAGE, kind)?;
        let name = self.latest_checkpoint.clone().unwrap_or_default();
        self.reporter.event(
            Event::new(kinds::FINAL_SAVED, format!("final checkpoint: {name}"))
                .with("name", &name)
                .with("path", &path)
                .with("step", self.step),
        )?;
        Ok(())
    }

    fn trainer_state(&self, stage: &str, with_optimizer: bool) -> TrainerState {
        let mut st = TrainerState::new(stage, self.step);
        st.total_steps = self.s.total_steps();
        st.epoch = self.reporter.hb.epoch.unwrap_or(0.0);
        st.epochs = self.reporter.hb.epochs;
        st.stage_step = self.pos.stage_step;
        st.lr = self.last_lr;
        st.loss = self.last_loss;
        // Only pretraining's validation loss is comparable across checkpoints
        // (retention keeps the best by it).
        let stage_kind = self.s.stages.get(self.pos.stage_index).map(|s| s.kind);
        if stage_kind == Some(StageKind::Pretrain) && stage != FINAL_STAGE {
            st.val_loss = self.val_loss;
        }
        st.best_val_loss = self.best_val_loss;
        st.data_cursor = json!({
            "stage": self.s.stages.get(self.pos.stage_index).map(|s| s.name.clone()),
            "stage_index": self.pos.stage_index,
            "epoch": self.pos.cursor.epoch,
            "index": self.pos.cursor.index,
            "chunk": self.s.chunk,
            "shards": self.shards,
        });
        st.rng_state = json!({ "seed": self.s.seed, "scheme": RNG_SCHEME });
        st.wall_time_s = self.wall_time_s();
        st.saved_at = lavender::time::rfc3339_z(lavender::time::now_utc());
        st.extra.insert("chunk".into(), json!(self.s.chunk));
        st.extra
            .insert("optimizer_state".into(), json!(with_optimizer));
        st.extra
            .insert("optimizer_step".into(), json!(self.opt.step));
        if let Some(r) = self.reference_step {
            st.extra.insert(REFERENCE_STEP.into(), json!(r));
        }
        if let Some(eval) = &self.last_eval {
            let mut m = serde_json::Map::new();
            m.insert("loss".into(), json!(eval.loss));
            for (k, v) in &eval.metrics {
                m.insert((*k).into(), json!(v));
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

/// What a checkpoint restores besides the weights.
pub struct Resumed {
    pub step: u64,
    pub pos: Position,
    pub best_val_loss: Option<f64>,
    pub val_loss: Option<f64>,
    pub last_loss: Option<f64>,
    pub last_lr: f64,
    pub wall_time_s: f64,
    pub reference: Option<Gpt>,
    pub reference_step: Option<u64>,
    /// Training continues a previous chunk's weights from step 0 of this chunk.
    pub new_chunk: bool,
    pub optimizer_loaded: bool,
}

/// The chunk a checkpoint was trained on, when it says.
pub fn chunk_of(ck: &Checkpoint) -> Option<u64> {
    let st = &ck.state;
    st.extra
        .get("chunk")
        .or_else(|| st.data_cursor.get("chunk"))
        .and_then(Value::as_u64)
}

/// Loads `ck` into `model` and `opt` and works out where training resumes.
pub fn load(ck: &Checkpoint, s: &Settings, model: &mut Gpt, opt: &mut AdamW) -> Result<Resumed> {
    model::load_weights(model, &ck.path.join(MODEL_FILE)).with_context(|| {
        format!(
            "could not load the weights of checkpoint {}",
            ck.path.display()
        )
    })?;
    let opt_file = ck.path.join(OPTIMIZER_FILE);
    let optimizer_loaded = opt_file.exists();
    if optimizer_loaded {
        opt.load(&model.params, &opt_file)?;
    }
    let st = &ck.state;
    let ck_chunk = chunk_of(ck);
    let mut r = Resumed {
        step: st.step,
        pos: Position::default(),
        best_val_loss: st.best_val_loss,
        val_loss: st.val_loss,
        last_loss: st.loss,
        last_lr: st.lr,
        wall_time_s: st.wall_time_s,
        reference: None,
        reference_step: None,
        new_chunk: false,
        optimizer_loaded,
    };
    if ck_chunk.is_some_and(|c| c != s.chunk as u64) {
        r.step = 0;
        r.new_chunk = true;
        r.wall_time_s = 0.0;
        return Ok(r);
    }
    if st.stage == FINAL_STAGE {
        r.pos.finished = true;
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
    r.pos = Position {
        stage_index,
        stage_step: st.stage_step,
        cursor,
        finished: false,
    };
    let stage = &s.stages[stage_index];
    if st.stage_step >= stage.steps {
        // The stage was complete: the next one starts afresh.
        r.pos = Position {
            stage_index: stage_index + 1,
            ..Position::default()
        };
    } else if stage.kind == StageKind::Dpo && st.stage_step > 0 {
        let want = st.extra.get(REFERENCE_STEP).and_then(Value::as_u64);
        let run = ck.path.parent().unwrap_or(Path::new("."));
        let path = run.join(REFERENCE_FILE);
        let mut reference = model.frozen_copy();
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

/// A checkpoint's model, ready for scoring or sampling: resolves `spec` (a checkpoint
/// directory, a run directory, or `latest`) under `<data_root>/checkpoints/`.
pub fn load_for_inference(
    s: &Settings,
    spec: &str,
    device: Option<&str>,
) -> Result<(Gpt, Checkpoint, tch::Device)> {
    let choice = match device {
        Some(d) => super::device::parse(d)?,
        None => s.config.device,
    };
    let device = super::device::select(choice)?;
    let root = s.data_root.join(lavender::run::CHECKPOINTS_DIR);
    let ck = checkpoint::resolve_resume(spec, &root)?;
    let weights = ck.path.join(MODEL_FILE);
    let file = model::tensor_file::TensorFile::read(&weights)?;
    let vocab = file
        .tensors
        .get("transformer.wte.weight")
        .map(|t| t.size()[0])
        .with_context(|| format!("{} has no transformer.wte.weight", weights.display()))?;
    drop(file);
    let mut cfg = s.model(vocab as u32);
    // The run's config.yaml names the sizes it trained, whatever scale is asked now.
    if let Some(run) = ck.path.parent()
        && let Ok(rc) = lavender::export::RunConfig::read(run)
    {
        let m = &rc.model;
        let size = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        cfg.n_layer = size(m.n_layer);
        cfg.n_head = size(m.n_head);
        cfg.n_embd = size(m.n_embd);
        cfg.n_positions = size(m.n_positions);
    }
    let mut m = Gpt::new(cfg, device)?;
    model::load_weights(&mut m, &weights)?;
    Ok((m, ck, device))
}
