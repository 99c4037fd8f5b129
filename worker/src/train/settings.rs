//! What the trainer reads from the layered config and the command line.

use std::path::PathBuf;

use anyhow::{Result, bail};
use lavender::config::{Config, ConfigError, ConfigOrigins, SaveOptimizerState};

use crate::cli::{Loaded, StepArgs, config_error};
use crate::model::GptConfig;
use crate::model::pretrained::Pretrained;
use crate::optim::AdamWConfig;

use super::divergence::SpikeRule;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageKind {
    Pretrain,
    Sft,
    Dpo,
}

impl StageKind {
    /// The key its loss has in `checkpoint_saved` events.
    pub fn loss_key(self) -> &'static str {
        match self {
            StageKind::Pretrain => "ce_loss",
            StageKind::Sft => "sft_loss",
            StageKind::Dpo => "dpo_loss",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Stage {
    pub name: String,
    pub kind: StageKind,
    pub steps: u64,
    pub lr: f64,
    pub checkpoint_every: u64,
    pub beta: f64,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub config: Config,
    pub data_root: PathBuf,
    pub seed: u64,
    pub threads: usize,
    pub adamw: AdamWConfig,
    pub grad_clip: f64,
    pub warmup_steps: u64,
    pub min_lr_ratio: f64,
    pub batch_size: usize,
    pub seq_len: usize,
    pub grad_accum: u64,
    pub log_every: u64,
    pub eval_every: u64,
    pub eval_batches: usize,
    pub keep_checkpoints: usize,
    pub save_optimizer_state: SaveOptimizerState,
    pub stages: Vec<Stage>,
    pub chunk: u8,
    /// When a run counts as diverged (`training.spike`).
    pub spike: SpikeRule,
    /// `model.init_from`, opened: the model's shape (already in `config`), vocabulary
    /// and starting weights.
    pub pretrained: Option<Pretrained>,
    /// Where each value of `config` was set (see `cli::Loaded::origins`).
    pub origins: ConfigOrigins,
}

impl Settings {
    /// `<data_root>/checkpoints/`: every run's checkpoints, where `latest` is looked for.
    pub fn checkpoints_root(&self) -> PathBuf {
        self.data_root.join(lavender::data_root::CHECKPOINTS)
    }

    /// The layered config of `args` (see [`StepArgs::load`]).
    /// With `model.init_from`, the checkpoint's shape replaces the scale's (see
    /// [`Pretrained::shape_config`]) and the run's config records its absolute path.
    /// A value the trainer cannot use is an error naming its key and where it was set.
    pub fn load(args: &StepArgs) -> Result<Settings> {
        let Loaded {
            mut config,
            data_root,
            config_dir,
            origins,
        } = args.load()?;
        let pretrained = match config.model.init_from.take() {
            Some(dir) => {
                let dir = config_dir.join(dir);
                let p = Pretrained::open(&dir)
                    .map_err(|e| config_error(&origins, "model.init_from", format!("{e:#}")))?;
                p.shape_config(&mut config)
                    .map_err(|e| origins.relocate(e))?;
                config.model.init_from = Some(dir);
                Some(p)
            }
            None => None,
        };
        let mut s = Settings::from_config(config, data_root).map_err(|e| origins.relocate(e))?;
        s.pretrained = pretrained;
        s.origins = origins;
        Ok(s)
    }

    /// The trainer's settings from `config`; a value it cannot use is an error naming
    /// its key (located by the caller).
    pub fn from_config(config: Config, data_root: PathBuf) -> Result<Settings, ConfigError> {
        let t = &config.training;
        let o = &config.optimizer;
        let mut stages = Vec::new();
        for (i, s) in t.stages.iter().enumerate() {
            let kind = match s.name.as_str() {
                "pretrain" => StageKind::Pretrain,
                "sft" => StageKind::Sft,
                "dpo" => StageKind::Dpo,
                other => {
                    return Err(ConfigError::invalid(
                        format!("training.stages[{i}].name"),
                        format!(
                            "{other:?} is not a stage the trainer runs; name it pretrain, sft or dpo"
                        ),
                    ));
                }
            };
            stages.push(Stage {
                name: s.name.clone(),
                kind,
                steps: config.stage_steps(i),
                lr: s.lr,
                checkpoint_every: s.checkpoint_every.max(1),
                beta: s.beta.unwrap_or(0.1),
            });
        }
        let n_positions = config.model_size().n_positions;
        if t.seq_len > n_positions {
            // Checked by the config's validation, except against a checkpoint's own
            // context length, which only the worker reads.
            let (whose, fix) = match &config.model.init_from {
                Some(dir) => (
                    format!("model.init_from's, {}", dir.display()),
                    String::new(),
                ),
                None => (
                    format!("scale {}", config.scale),
                    " or set model.n_positions".into(),
                ),
            };
            return Err(ConfigError::invalid(
                "training.seq_len",
                format!(
                    "{} exceeds the model's n_positions = {n_positions} ({whose}); lower training.seq_len to {n_positions} or less{fix}",
                    t.seq_len
                ),
            ));
        }
        let threads = match config.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n as usize,
        };
        Ok(Settings {
            data_root,
            seed: config.seed,
            threads,
            adamw: AdamWConfig {
                beta1: o.betas[0],
                beta2: o.betas[1],
                eps: o.eps,
                weight_decay: o.weight_decay,
            },
            grad_clip: o.grad_clip,
            warmup_steps: o.warmup_steps,
            min_lr_ratio: o.min_lr_ratio,
            batch_size: t.batch_size.max(1) as usize,
            seq_len: t.seq_len.max(1) as usize,
            grad_accum: t.grad_accum.max(1) as u64,
            log_every: t.log_every.max(1),
            eval_every: t.eval_every.max(1),
            eval_batches: t.eval_batches.max(1) as usize,
            keep_checkpoints: t.keep_checkpoints.max(1) as usize,
            save_optimizer_state: t.save_optimizer_state,
            chunk: config.chunk.clamp(1, 255) as u8,
            spike: SpikeRule::from(&t.spike),
            stages,
            config,
            pretrained: None,
            origins: ConfigOrigins::default(),
        })
    }

    pub fn total_steps(&self) -> u64 {
        self.stages.iter().map(|s| s.steps).sum()
    }

    /// The model for a tokenizer of `vocab_size` tokens: the `model` keys that are
    /// set, the scale preset's size for the rest; with `model.init_from`, the
    /// checkpoint's shape and vocabulary (which holds the tokenizer's).
    pub fn model(&self, vocab_size: u32) -> Result<GptConfig> {
        let size = self.config.model_size();
        let m = &self.config.model;
        let vocab_size = match &self.pretrained {
            Some(p) if vocab_size > p.shape.vocab_size => bail!(
                "the tokens' tokenizer has {vocab_size} tokens, more than model.init_from's vocab_size {} ({}); rerun `lavender-worker precompute` so it uses that checkpoint's tokenizer",
                p.shape.vocab_size,
                p.dir.display()
            ),
            Some(p) => p.shape.vocab_size,
            None => vocab_size,
        };
        Ok(GptConfig {
            vocab_size: vocab_size as i64,
            n_positions: size.n_positions as i64,
            n_embd: size.n_embd as i64,
            n_layer: size.n_layer as i64,
            n_head: size.n_head as i64,
            dropout: m.dropout,
            layer_norm_epsilon: m.layer_norm_epsilon,
        })
    }

    /// The run's `config.yaml` ([`lavender_export::run_config_yaml`]): bergson's
    /// reading of the run (`train:`: AdamW, the final model's export), the resolved
    /// config (with the model sizes it trains, whether set or the scale's), then
    /// SOURCE's `momentum` (0.0) and AdamW's `adam_beta1`.
    pub fn run_config_yaml(&self, run_dir: &std::path::Path) -> String {
        lavender_export::run_config_yaml(&self.config, run_dir, self.total_steps())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(scale: &str, sets: &[&str]) -> Settings {
        let args = StepArgs {
            config: None,
            data_root: Some("/tmp/x".into()),
            run_dir: None,
            scale: Some(scale.into()),
            chunk: None,
            force: false,
            overrides: sets.iter().map(|s| s.to_string()).collect(),
            config_origins: None,
        };
        Settings::load(&args).unwrap()
    }

    #[test]
    fn the_model_is_the_scale_s_unless_set_and_the_run_config_records_it() {
        let shape = |s: &Settings| {
            let m = s.model(2048).unwrap();
            (m.n_layer, m.n_head, m.n_embd, m.n_positions)
        };
        assert_eq!(shape(&at("tiny", &[])), (2, 2, 64, 128));
        assert_eq!(shape(&at("small", &[])), (6, 6, 384, 256));
        assert_eq!(shape(&at("large", &[])), (12, 12, 768, 1024));
        assert_eq!(shape(&at("small", &["model.n_layer=3"])), (3, 6, 384, 256));

        // The run's config.yaml names the sizes trained, which export reads.
        let s = at("medium", &[]);
        let path = std::path::Path::new("run/config.yaml");
        let rc = lavender_export::RunConfig::parse(
            &s.run_config_yaml(std::path::Path::new("/run")),
            path,
        )
        .unwrap();
        let m = rc.model;
        assert_eq!(
            (m.n_layer, m.n_head, m.n_embd, m.n_positions),
            (8, 8, 512, 512)
        );
    }
}
