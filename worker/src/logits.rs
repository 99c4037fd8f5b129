//! `lavender-worker logits`: the model's logits for one token sequence, as JSON. The
//! reference an exported checkpoint is checked against in another framework.

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use clap::Args;
use serde_json::json;
use tch::{Device, Tensor};

use crate::model::{self, Gpt, GptConfig, MODEL_FILE};

#[derive(Args, Debug, Clone)]
pub struct LogitsArgs {
    /// A lavender checkpoint inside its run, or an exported checkpoint-<step>.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Token ids, comma-separated (e.g. 1,2,3).
    #[arg(long, value_delimiter = ',', required = true)]
    pub ids: Vec<i64>,
}

/// Prints `{"checkpoint", "ids", "logits": [[f32; vocab]; ids]}` on stdout.
pub fn run(a: LogitsArgs) -> Result<()> {
    let d = lavender_export::model_dims(&a.checkpoint)?;
    let n = a.ids.len() as i64;
    ensure!(
        n as u64 <= d.n_positions,
        "--ids has {n} tokens; the model's context is {} (n_positions)",
        d.n_positions
    );
    if let Some(bad) = a.ids.iter().find(|&&i| i < 0 || i as u64 >= d.vocab_size) {
        anyhow::bail!("--ids: {bad} is outside the vocabulary 0..{}", d.vocab_size);
    }
    let cfg = GptConfig {
        vocab_size: d.vocab_size as i64,
        n_positions: d.n_positions as i64,
        n_embd: d.n_embd as i64,
        n_layer: d.n_layer as i64,
        n_head: d.n_head as i64,
        dropout: 0.0,
        layer_norm_epsilon: d.layer_norm_epsilon,
    };
    let mut m = Gpt::new(cfg, Device::Cpu)?;
    let weights = a.checkpoint.join(MODEL_FILE);
    model::load_weights(&mut m, &weights)
        .with_context(|| format!("could not load {}", weights.display()))?;
    let idx = Tensor::from_slice(&a.ids).view([1, n]);
    let logits = tch::no_grad(|| m.forward(&idx, false));
    let flat = Vec::<f32>::try_from(logits.reshape([-1]))
        .context("could not read the logits back from libtorch")?;
    let rows: Vec<&[f32]> = flat.chunks(d.vocab_size as usize).collect();
    println!(
        "{}",
        json!({"checkpoint": a.checkpoint, "ids": a.ids, "logits": rows})
    );
    Ok(())
}
