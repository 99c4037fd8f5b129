//! A run's `config.yaml`: what the worker writes when the run starts
//! ([`run_config_yaml`]), and what export, resolve and attribute read from it (the
//! model's shape, the optimizer — AdamW: SOURCE's Adam-preconditioned variant,
//! momentum 0 — and a few training settings).
//!
//! The file serves two readers. bergson's run reader (SOURCE's `resolve()`,
//! `bergson/approx_unrolling/train_cfg_io.py`) takes the first top-level mapping as
//! the run's training config in bergson's names: the `train:` section, which says
//! `optimizer: adamw` (so bergson derives momentum 0.0 and knows the run is
//! AdamW's), the model path and β1 as `adam_beta1`. lavender's resolved config
//! follows, except that the pipeline's `steps` are written as `pipeline_steps`
//! (bergson takes a top-level `steps` for its own list of commands), and then
//! `momentum: 0.0` (SOURCE's heavy-ball β) and `adam_beta1`.
//!
//! Read as a partial view rather than through [`lavender::config::Config`]: the file
//! carries keys the strict pipeline config does not know, and an export must not
//! fail because a run was written by an older or newer lavender with a key more or
//! less. Runs written before `adam_beta1` existed say `momentum: <β1>`; they read
//! the same (β1 from `optimizer.betas`, SOURCE's momentum 0.0).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{ExportError, Result};
use crate::names::{CONFIG_FILE, EXPORT_DIR};
use crate::yaml::yaml_float;
use lavender::config::Config;
use lavender::error::IoContext;

/// The run's `config.yaml` (see the module's documentation): bergson's `train:`
/// section, `config` resolved (the model sizes it trains), then SOURCE's
/// `momentum` and AdamW's `adam_beta1`. `final_step` is the step of the run's
/// final checkpoint, whose export (`<run>/exported/checkpoint-<final_step>`) is
/// the model bergson's reader takes as the run's.
pub fn run_config_yaml(config: &Config, run_dir: &Path, final_step: u64) -> String {
    let config = config.resolved();
    let run_dir = std::path::absolute(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
    let quoted =
        |p: &Path| serde_json::to_string(&p.display().to_string()).expect("a string serializes");
    let o = &config.optimizer;
    let t = &config.training;
    let model = run_dir
        .join(EXPORT_DIR)
        .join(format!("checkpoint-{final_step}"));
    let mut s = String::new();
    s.push_str(
        "# lavender: the run's config, written when the run started.\n\
         # `train` is the run as bergson's run reader takes it (the first top-level\n\
         # mapping, in bergson's names); lavender's resolved config follows, its\n\
         # pipeline `steps` as `pipeline_steps` (bergson reads a top-level `steps`).\n",
    );
    s.push_str("train:\n");
    s.push_str(&format!("  run_path: {}\n", quoted(&run_dir)));
    s.push_str(&format!(
        "  # The final checkpoint as `lavenderd export` writes it.\n  model: {}\n",
        quoted(&model)
    ));
    s.push_str("  optimizer: adamw\n");
    s.push_str(&format!("  adam_beta1: {}\n", yaml_float(o.betas[0])));
    s.push_str(&format!("  adam_beta2: {}\n", yaml_float(o.betas[1])));
    s.push_str(&format!("  adam_eps: {}\n", yaml_float(o.eps)));
    s.push_str("  eps_root: 0.0\n");
    s.push_str(&format!("  weight_decay: {}\n", yaml_float(o.weight_decay)));
    s.push_str(&format!("  max_grad_norm: {}\n", yaml_float(o.grad_clip)));
    s.push_str(&format!(
        "  batch_size: {}\n",
        u64::from(t.batch_size) * u64::from(t.grad_accum.max(1))
    ));
    s.push_str(&format!("  grad_accum_steps: {}\n", t.grad_accum.max(1)));
    s.push_str(&format!("  seed: {}\n", config.seed));
    s.push_str(&format!(
        "  save_optimizer_state: {}\n",
        t.save_optimizer_state.as_str()
    ));
    for line in config.to_yaml().lines() {
        if line.starts_with('#') {
            continue;
        }
        match line.strip_prefix("steps:") {
            Some(rest) => {
                s.push_str("pipeline_steps:");
                s.push_str(rest);
            }
            None => s.push_str(line),
        }
        s.push('\n');
    }
    s.push_str(&format!(
        "# SOURCE's momentum (heavy-ball SGD's beta): 0.0 for AdamW, whose beta1 is adam_beta1.\n\
         momentum: 0.0\n\
         adam_beta1: {}\n",
        yaml_float(o.betas[0])
    ));
    s
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub path: PathBuf,
    pub model: ModelSection,
    /// AdamW's (β1, β2).
    pub betas: [f64; 2],
    pub eps: f64,
    pub weight_decay: f64,
    /// AdamW's β1 (`optimizer.betas[0]`; the worker also writes it as a top-level
    /// `adam_beta1:` key, older runs as `momentum:`). Not SOURCE's momentum: see
    /// [`RunConfig::source_momentum`].
    pub beta1: f64,
    /// The pipeline chunk the run trained on (0 when the file does not say).
    pub chunk: u64,
    /// `training.seq_len`: a pretraining window is `seq_len + 1` tokens (0 when
    /// the file does not say).
    pub seq_len: u64,
    pub batch_size: u64,
    pub grad_accum: u64,
    pub eval_every: u64,
    /// `(stage name, checkpoint_every)` in training order.
    pub stages: Vec<(String, u64)>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModelSection {
    pub n_layer: u64,
    pub n_head: u64,
    pub n_embd: u64,
    pub n_positions: u64,
    #[serde(default)]
    pub dropout: f64,
    pub layer_norm_epsilon: f64,
}

#[derive(Deserialize)]
struct Raw {
    /// SOURCE's momentum where `adam_beta1` is given; AdamW's β1 in older runs.
    momentum: Option<f64>,
    adam_beta1: Option<f64>,
    #[serde(default)]
    chunk: Option<u64>,
    model: ModelSection,
    optimizer: RawOptimizer,
    #[serde(default)]
    training: RawTraining,
}

#[derive(Deserialize)]
struct RawOptimizer {
    betas: [f64; 2],
    eps: f64,
    weight_decay: f64,
}

#[derive(Deserialize, Default)]
struct RawTraining {
    #[serde(default)]
    batch_size: u64,
    #[serde(default)]
    grad_accum: u64,
    #[serde(default)]
    eval_every: u64,
    #[serde(default)]
    seq_len: u64,
    #[serde(default)]
    stages: Vec<RawStage>,
}

#[derive(Deserialize)]
struct RawStage {
    name: String,
    #[serde(default)]
    checkpoint_every: u64,
}

impl RunConfig {
    /// Reads `<run_dir>/config.yaml`.
    pub fn read(run_dir: &Path) -> Result<RunConfig> {
        let path = run_dir.join(CONFIG_FILE);
        if !path.is_file() {
            return Err(ExportError::missing(
                "the run's config.yaml",
                &path,
                "is this a lavender run directory? `lavenderd runs` lists them",
            ));
        }
        let text = std::fs::read_to_string(&path).ctx("read", &path)?;
        RunConfig::parse(&text, &path)
    }

    /// Parses the text of a run's `config.yaml`; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<RunConfig> {
        let raw: Raw = serde_saphyr::from_str(text)
            .map_err(|e| ExportError::invalid(path, format!("not a lavender run config: {e}")))?;
        let beta1 = raw.optimizer.betas[0];
        let momentum = match (raw.adam_beta1, raw.momentum) {
            (Some(b), _) if b != beta1 => {
                return Err(ExportError::invalid(
                    path,
                    format!(
                        "adam_beta1: {b} disagrees with optimizer.betas[0]: {beta1}, which the optimizer used; fix or remove the adam_beta1 key"
                    ),
                ));
            }
            (Some(_), Some(m)) if m != 0.0 => {
                return Err(ExportError::invalid(
                    path,
                    format!(
                        "momentum: {m} is SOURCE's heavy-ball momentum, which is 0.0 for an AdamW run (its beta1 is adam_beta1); set momentum: 0.0"
                    ),
                ));
            }
            (Some(b), _) => b,
            // Written before adam_beta1: `momentum` was β1.
            (None, Some(m)) if m != beta1 => {
                return Err(ExportError::invalid(
                    path,
                    format!(
                        "momentum: {m} disagrees with optimizer.betas[0]: {beta1}, which the optimizer used; fix or remove the momentum key"
                    ),
                ));
            }
            (None, Some(m)) => m,
            (None, None) => beta1,
        };
        if !(0.0..1.0).contains(&momentum) {
            return Err(ExportError::invalid(
                path,
                format!("optimizer.betas[0] = {momentum} is not in [0, 1)"),
            ));
        }
        Ok(RunConfig {
            path: path.to_path_buf(),
            model: raw.model,
            betas: raw.optimizer.betas,
            eps: raw.optimizer.eps,
            weight_decay: raw.optimizer.weight_decay,
            beta1: momentum,
            chunk: raw.chunk.unwrap_or(0),
            seq_len: raw.training.seq_len,
            batch_size: raw.training.batch_size,
            grad_accum: raw.training.grad_accum.max(1),
            eval_every: raw.training.eval_every,
            stages: raw
                .training
                .stages
                .into_iter()
                .map(|s| (s.name, s.checkpoint_every))
                .collect(),
        })
    }

    /// The optimizer the run trained with, as bergson names it: lavender trains
    /// with AdamW (the `optimizer:` section has no other kind).
    pub fn optimizer(&self) -> &'static str {
        "adamw"
    }

    /// SOURCE's `momentum` for this run: the heavy-ball SGD β by which it scales
    /// each segment's lr×steps (1/(1−β)). AdamW's first moment is an average of
    /// gradients, not a heavy-ball velocity, so an AdamW run's is 0.0 (bergson
    /// derives the same for its own AdamW runs); β1 is not a momentum here. A run
    /// trained with SGD momentum β elsewhere is resolved with `--momentum β`.
    pub fn source_momentum(&self) -> f64 {
        0.0
    }

    /// SOURCE's Adam-preconditioned variant applies (every lavender run: AdamW).
    pub fn adam_preconditioned(&self) -> bool {
        true
    }

    /// `checkpoint_every` of the stage named `stage` (0 when unknown, e.g. `final`).
    pub fn checkpoint_every(&self, stage: &str) -> u64 {
        self.stages
            .iter()
            .find(|(name, _)| name == stage)
            .map_or(0, |(_, every)| *every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::config::Config;

    #[test]
    fn reads_a_resolved_config_and_the_workers_momentum_key() {
        let mut cfg = Config::default();
        cfg.optimizer.betas = [0.95, 0.99];
        // What the worker writes: the config with the model sizes resolved.
        let cfg = cfg.resolved();
        let text = format!("{}\nmomentum: 0.95\n", cfg.to_yaml());
        let rc = RunConfig::parse(&text, Path::new("config.yaml")).unwrap();
        assert_eq!(rc.beta1, 0.95);
        assert_eq!(
            rc.source_momentum(),
            0.0,
            "AdamW's β1 is not SOURCE's momentum"
        );
        assert!(rc.adam_preconditioned());
        assert_eq!(rc.betas, [0.95, 0.99]);
        assert_eq!(rc.model.n_embd, u64::from(cfg.model_size().n_embd));
        assert_eq!(rc.batch_size, cfg.training.batch_size as u64);
        assert_eq!(rc.checkpoint_every("pretrain"), 100);

        // Without the key, β1 is the momentum.
        let rc = RunConfig::parse(&cfg.to_yaml(), Path::new("config.yaml")).unwrap();
        assert_eq!(rc.beta1, 0.95);
    }

    #[test]
    fn the_written_config_reads_back_and_leads_with_bergsons_section() {
        let mut cfg = Config::default();
        cfg.optimizer.betas = [0.9, 0.95];
        cfg.training.grad_accum = 2;
        let text = run_config_yaml(&cfg, Path::new("/data/checkpoints/run-1"), 1400);
        let rc = RunConfig::parse(&text, Path::new("config.yaml")).unwrap();
        assert_eq!((rc.beta1, rc.source_momentum()), (0.9, 0.0));
        assert_eq!(rc.seq_len, u64::from(cfg.training.seq_len));
        assert_eq!(rc.chunk, 1);
        assert_eq!(rc.model.n_positions, 128, "resolved: the scale's sizes");
        // bergson takes the first top-level mapping as its training config, and a
        // top-level `steps` as its list of commands: `train` is first, no `steps`.
        let top: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with([' ', '#', '-']) && l.contains(':'))
            .map(|l| l.split(':').next().unwrap())
            .collect();
        assert_eq!(top[0], "train", "{text}");
        assert!(
            !top.contains(&"steps") && top.contains(&"pipeline_steps"),
            "{top:?}"
        );
        for want in [
            "  run_path: \"/data/checkpoints/run-1\"\n",
            "  model: \"/data/checkpoints/run-1/exported/checkpoint-1400\"\n",
            "  optimizer: adamw\n",
            "  adam_beta1: 0.9\n",
            "  adam_beta2: 0.95\n",
            "  adam_eps: 1.0e-8\n",
            "  batch_size: 32\n",
            "  grad_accum_steps: 2\n",
            "\nmomentum: 0.0\nadam_beta1: 0.9\n",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
        // The rest is lavender's resolved config, key for key.
        let lavender = text
            .lines()
            .skip_while(|l| l.starts_with(['#', ' ']) || *l == "train:")
            .map(|l| match l.strip_prefix("pipeline_steps:") {
                Some(rest) => format!("steps:{rest}"),
                None => l.to_string(),
            })
            .take_while(|l| !l.starts_with("# SOURCE"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            Config::from_yaml_str(&lavender, "run/config.yaml").unwrap(),
            cfg.resolved()
        );

        // A momentum that is not SOURCE's 0.0, or a beta1 the optimizer did not use.
        let bad = text.replace("\nmomentum: 0.0\n", "\nmomentum: 0.9\n");
        let err = RunConfig::parse(&bad, Path::new("run/config.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("run/config.yaml") && err.contains("momentum: 0.9 is SOURCE's"),
            "{err}"
        );
        let bad = text.replace("\nadam_beta1: 0.9\n", "\nadam_beta1: 0.8\n");
        let err = RunConfig::parse(&bad, Path::new("run/config.yaml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("adam_beta1: 0.8 disagrees"), "{err}");
    }

    #[test]
    fn a_momentum_that_contradicts_beta1_is_an_error() {
        let text = format!(
            "{}\nmomentum: 0.0\n",
            Config::default().resolved().to_yaml()
        );
        let err = RunConfig::parse(&text, Path::new("run/config.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("run/config.yaml") && err.contains("momentum: 0 disagrees"),
            "{err}"
        );
    }

    #[test]
    fn a_foreign_yaml_names_the_file() {
        let err = RunConfig::parse("lr: 3\n", Path::new("x/config.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("x/config.yaml") && err.contains("not a lavender run config"),
            "{err}"
        );
    }
}
