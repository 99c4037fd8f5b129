//! A checkpoint's model for scoring or sampling (`generate`, `mine_hard`).

use std::path::Path;

use anyhow::{Context, Result};
use lavender::checkpoint::{self, Checkpoint};
use tch::Device;

use super::tensor_file::TensorFile;
use super::{Gpt, GptConfig, MODEL_FILE, load_weights};

/// Resolves `spec` (a checkpoint directory, a run directory, or `latest`) under
/// `checkpoints_root` and loads its model onto `device`. `base` gives what the
/// weights do not say (dropout, layer-norm epsilon, and the sizes when the run has
/// no `config.yaml`); the vocabulary comes from the weights, the sizes from the run.
pub fn load_for_inference(
    checkpoints_root: &Path,
    spec: &str,
    base: GptConfig,
    device: Device,
) -> Result<(Gpt, Checkpoint)> {
    let ck = checkpoint::resolve_resume(spec, checkpoints_root)?;
    let weights = ck.path.join(MODEL_FILE);
    let file = TensorFile::read(&weights)?;
    let vocab = file
        .tensors
        .get("transformer.wte.weight")
        .map(|t| t.size()[0])
        .with_context(|| format!("{} has no transformer.wte.weight", weights.display()))?;
    drop(file);
    let mut cfg = GptConfig {
        vocab_size: vocab,
        ..base
    };
    // The run's config.yaml names the sizes it trained, whatever scale is asked now.
    if let Some(run) = ck.path.parent()
        && let Ok(rc) = lavender_export::RunConfig::read(run)
    {
        let m = &rc.model;
        let size = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        cfg.n_layer = size(m.n_layer);
        cfg.n_head = size(m.n_head);
        cfg.n_embd = size(m.n_embd);
        cfg.n_positions = size(m.n_positions);
        cfg.layer_norm_epsilon = m.layer_norm_epsilon;
    }
    let mut m = Gpt::new(cfg, device)?;
    load_weights(&mut m, &weights)?;
    Ok((m, ck))
}
