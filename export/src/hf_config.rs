//! The JSON files that make an exported checkpoint a Hugging Face model directory:
//! `config.json` (`GPT2LMHeadModel`), `generation_config.json` and
//! `tokenizer_config.json`; and [`model_dims`], the model's shape for any checkpoint.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{ExportError, Result};
use crate::names::{CONFIG_JSON, MODEL_FILE};
use crate::run_config::RunConfig;
use crate::tensors::{self, Weights};
use lavender::error::IoContext;

/// lavender's tokenizer: end of text, also the beginning of a sequence as in GPT-2.
const EOS_NAMES: [&str; 3] = ["<|endoftext|>", "</s>", "<eos>"];
const PAD_NAMES: [&str; 2] = ["<|pad|>", "<pad>"];

/// The shape of a lavender GPT-2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelDims {
    pub vocab_size: u64,
    pub n_positions: u64,
    pub n_embd: u64,
    pub n_layer: u64,
    pub n_head: u64,
    pub layer_norm_epsilon: f64,
    pub dropout: f64,
}

impl ModelDims {
    /// The dimensions a GPT-2 `config.json` (Hugging Face's names) states; `Err`
    /// names the first dimension that is missing or not a positive integer.
    pub fn from_config_json(v: &Value) -> std::result::Result<ModelDims, &'static str> {
        let int = |key: &'static str| {
            v.get(key)
                .and_then(Value::as_u64)
                .filter(|&n| n > 0)
                .ok_or(key)
        };
        Ok(ModelDims {
            vocab_size: int("vocab_size")?,
            n_positions: int("n_positions")?,
            n_embd: int("n_embd")?,
            n_layer: int("n_layer")?,
            n_head: int("n_head")?,
            layer_norm_epsilon: v
                .get("layer_norm_epsilon")
                .and_then(Value::as_f64)
                .unwrap_or(1e-5),
            dropout: v.get("resid_pdrop").and_then(Value::as_f64).unwrap_or(0.0),
        })
    }

    /// The run's `model:` section checked against the weights actually saved (the
    /// vocabulary size is the tokenizer's, so only the weights know it).
    pub(crate) fn from_run(rc: &RunConfig, w: &Weights, weights_path: &Path) -> Result<ModelDims> {
        let m = &rc.model;
        for (key, config, file) in [
            ("n_embd", m.n_embd, w.n_embd),
            ("n_layer", m.n_layer, w.n_layer),
            ("n_positions", m.n_positions, w.n_positions),
        ] {
            if config != file {
                return Err(ExportError::invalid(
                    weights_path,
                    format!(
                        "has {key} = {file}, but {} says model.{key}: {config}; the checkpoint is not from this run",
                        rc.path.display()
                    ),
                ));
            }
        }
        if m.n_head == 0 || !m.n_embd.is_multiple_of(m.n_head) {
            return Err(ExportError::invalid(
                &rc.path,
                format!(
                    "model.n_head = {} does not divide model.n_embd = {}",
                    m.n_head, m.n_embd
                ),
            ));
        }
        Ok(ModelDims {
            vocab_size: w.vocab_size,
            n_positions: m.n_positions,
            n_embd: m.n_embd,
            n_layer: m.n_layer,
            n_head: m.n_head,
            layer_norm_epsilon: m.layer_norm_epsilon,
            dropout: m.dropout,
        })
    }
}

/// The model shape of a checkpoint directory: an exported one (its `config.json`)
/// or a lavender one (its run's `config.yaml` and its `model.safetensors`).
pub fn model_dims(checkpoint: &Path) -> Result<ModelDims> {
    let config_json = checkpoint.join(CONFIG_JSON);
    if config_json.is_file() {
        let bytes = std::fs::read(&config_json).ctx("read", &config_json)?;
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ExportError::invalid(&config_json, format!("not JSON: {e}")))?;
        return ModelDims::from_config_json(&v).map_err(|key| {
            ExportError::invalid(&config_json, format!("has no positive integer {key:?}"))
        });
    }
    if lavender::checkpoint::is_complete(checkpoint)
        && let Some(run) = checkpoint.parent()
    {
        let rc = RunConfig::read(run)?;
        let weights_path = checkpoint.join(MODEL_FILE);
        let w = tensors::inspect_model(&weights_path)?;
        return ModelDims::from_run(&rc, &w, &weights_path);
    }
    Err(ExportError::missing(
        "a model description (config.json, or trainer_state.json inside a run)",
        checkpoint,
        "pass an exported checkpoint-<step> directory or a lavender checkpoint inside its run",
    ))
}

/// The tokenizer's special tokens, by id, found in its `added_tokens`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecialTokens {
    pub eos: Option<(String, u64)>,
    pub pad: Option<(String, u64)>,
}

impl SpecialTokens {
    /// Reads the special tokens of a `tokenizer.json`.
    pub fn read(tokenizer_json: &Path) -> Result<SpecialTokens> {
        let bytes = std::fs::read(tokenizer_json).ctx("read", tokenizer_json)?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
            ExportError::invalid(tokenizer_json, format!("not a tokenizer.json: {e}"))
        })?;
        let added: Vec<(String, u64)> = v
            .get("added_tokens")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| {
                        Some((
                            t.get("content")?.as_str()?.to_string(),
                            t.get("id")?.as_u64()?,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let find = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| added.iter().find(|(c, _)| c == n).cloned())
        };
        Ok(SpecialTokens {
            eos: find(&EOS_NAMES),
            pad: find(&PAD_NAMES),
        })
    }

    fn id_json(t: &Option<(String, u64)>) -> Value {
        t.as_ref().map_or(Value::Null, |(_, id)| json!(id))
    }

    fn text_json(t: &Option<(String, u64)>) -> Value {
        t.as_ref().map_or(Value::Null, |(s, _)| json!(s))
    }
}

/// `config.json` for `GPT2LMHeadModel`: lavender's block is GPT-2's (pre-LayerNorm,
/// Conv1D projections, tanh GELU = `gelu_new`, tied head).
pub fn model_config(d: &ModelDims, dtype: &str, sp: &SpecialTokens) -> Value {
    json!({
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": d.dropout,
        "bos_token_id": SpecialTokens::id_json(&sp.eos),
        "embd_pdrop": d.dropout,
        "eos_token_id": SpecialTokens::id_json(&sp.eos),
        "initializer_range": 0.02,
        "layer_norm_epsilon": d.layer_norm_epsilon,
        "model_type": "gpt2",
        "n_ctx": d.n_positions,
        "n_embd": d.n_embd,
        "n_head": d.n_head,
        "n_inner": null,
        "n_layer": d.n_layer,
        "n_positions": d.n_positions,
        "pad_token_id": SpecialTokens::id_json(&sp.pad),
        "reorder_and_upcast_attn": false,
        "resid_pdrop": d.dropout,
        "scale_attn_by_inverse_layer_idx": false,
        "scale_attn_weights": true,
        "tie_word_embeddings": true,
        "torch_dtype": dtype,
        "use_cache": true,
        "vocab_size": d.vocab_size,
    })
}

pub fn generation_config(sp: &SpecialTokens) -> Value {
    json!({
        "bos_token_id": SpecialTokens::id_json(&sp.eos),
        "eos_token_id": SpecialTokens::id_json(&sp.eos),
        "pad_token_id": SpecialTokens::id_json(&sp.pad),
    })
}

/// `tokenizer_config.json`: the byte-level BPE in `tokenizer.json` as GPT-2's
/// tokenizer, no prefix space and no added BOS (lavender encodes text as is).
pub fn tokenizer_config(d: &ModelDims, sp: &SpecialTokens) -> Value {
    json!({
        "add_bos_token": false,
        "add_prefix_space": false,
        "bos_token": SpecialTokens::text_json(&sp.eos),
        "clean_up_tokenization_spaces": false,
        "eos_token": SpecialTokens::text_json(&sp.eos),
        "model_max_length": d.n_positions,
        "pad_token": SpecialTokens::text_json(&sp.pad),
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": SpecialTokens::text_json(&sp.eos),
    })
}
