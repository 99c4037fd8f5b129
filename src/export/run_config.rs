//! What export and resolve read from a run's `config.yaml`: the model's shape, the
//! optimizer (AdamW: SOURCE's Adam-preconditioned variant, momentum 0) and a few
//! training settings.
//!
//! Read as a partial view rather than through [`crate::config::Config`]: the worker
//! appends a top-level `momentum:` key for tools like this one, which the strict
//! pipeline config does not know, and an export must not fail because a run was
//! written by an older or newer lavender with a key more or less.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ExportError, Result};
use crate::error::IoContext;

pub const CONFIG_FILE: &str = "config.yaml";

#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub path: PathBuf,
    pub model: ModelSection,
    /// AdamW's (β1, β2).
    pub betas: [f64; 2],
    pub eps: f64,
    pub weight_decay: f64,
    /// AdamW's β1 (`optimizer.betas[0]`; the worker also writes it as a top-level
    /// `momentum:` key). Not SOURCE's momentum: see [`RunConfig::source_momentum`].
    pub beta1: f64,
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
    momentum: Option<f64>,
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
        let momentum = match raw.momentum {
            Some(m) if m != beta1 => {
                return Err(ExportError::invalid(
                    path,
                    format!(
                        "momentum: {m} disagrees with optimizer.betas[0]: {beta1}, which the optimizer used; fix or remove the momentum key"
                    ),
                ));
            }
            Some(m) => m,
            None => beta1,
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
    use crate::config::Config;

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
