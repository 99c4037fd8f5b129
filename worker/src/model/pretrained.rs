//! `model.init_from`: a Hugging Face GPT-2 checkpoint directory to start from. Its
//! `config.json` gives the model's shape, its `tokenizer.json` replaces the tokenizer
//! precompute would train, and its weights (`model.safetensors`, or the `torch.save`
//! archive `pytorch_model.bin`) are where training starts. Checked when opened, so a
//! directory that is not such a checkpoint says which file is missing before any work.
//! The messages of [`Pretrained::open`] are about the value of `model.init_from`; the
//! caller names the key and where it was set (`cli::config_error`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use lavender::config::{Config, ConfigError};
use lavender_export::TorchDtype;
use serde_json::Value;

use super::{Gpt, load_named};

pub const CONFIG_JSON: &str = "config.json";
pub const SAFETENSORS: &str = "model.safetensors";
pub const TORCH_BIN: &str = "pytorch_model.bin";
pub const TOKENIZER_JSON: &str = "tokenizer.json";

/// What the rest of the message says a checkpoint directory holds.
const HOLDS: &str = "config.json, model.safetensors or pytorch_model.bin, and tokenizer.json";

/// The shape `config.json` gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub vocab_size: u32,
    pub n_positions: u32,
    pub n_embd: u32,
    pub n_layer: u32,
    pub n_head: u32,
    pub layer_norm_epsilon: f64,
}

/// An opened, checked checkpoint directory.
#[derive(Debug, Clone)]
pub struct Pretrained {
    pub dir: PathBuf,
    pub shape: Shape,
    /// `model.safetensors`, else `pytorch_model.bin`.
    pub weights: PathBuf,
    pub tokenizer: PathBuf,
}

impl Pretrained {
    pub fn open(dir: &Path) -> Result<Pretrained> {
        let shown = dir.display();
        ensure!(
            dir.is_dir(),
            "{shown} is not a directory; give a Hugging Face GPT-2 checkpoint directory ({HOLDS})"
        );
        let missing = |file: &str, what: &str| {
            anyhow::anyhow!(
                "{shown} is not a Hugging Face GPT-2 checkpoint: {file} is missing; {what}"
            )
        };
        let config = dir.join(CONFIG_JSON);
        if !config.is_file() {
            return Err(missing(
                CONFIG_JSON,
                "write the directory with `model.save_pretrained(dir)` and `tokenizer.save_pretrained(dir)`",
            ));
        }
        let shape = read_shape(&config)?;
        let weights = [SAFETENSORS, TORCH_BIN]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.is_file());
        let Some(weights) = weights else {
            if dir.join("model.safetensors.index.json").is_file() {
                bail!(
                    "{shown} holds a sharded checkpoint (model.safetensors.index.json); save it as one file (`save_pretrained(dir, max_shard_size=\"100GB\")`)"
                );
            }
            return Err(missing(
                "model.safetensors (or pytorch_model.bin)",
                "save the model with `model.save_pretrained(dir)`",
            ));
        };
        let tokenizer = dir.join(TOKENIZER_JSON);
        if !tokenizer.is_file() {
            return Err(missing(
                TOKENIZER_JSON,
                "save a fast tokenizer into it (`AutoTokenizer.from_pretrained(...).save_pretrained(dir)` writes tokenizer.json)",
            ));
        }
        Ok(Pretrained {
            dir: dir.to_path_buf(),
            shape,
            weights,
            tokenizer,
        })
    }

    /// Sets the config's model shape to the checkpoint's. A size key the config sets
    /// to another value is an error naming both; the layer-norm epsilon is the
    /// checkpoint's.
    pub fn shape_config(&self, config: &mut Config) -> Result<(), ConfigError> {
        let m = &mut config.model;
        let s = &self.shape;
        for (key, set, have) in [
            ("n_layer", &mut m.n_layer, s.n_layer),
            ("n_head", &mut m.n_head, s.n_head),
            ("n_embd", &mut m.n_embd, s.n_embd),
            ("n_positions", &mut m.n_positions, s.n_positions),
        ] {
            if let Some(v) = *set
                && v != have
            {
                return Err(ConfigError::invalid(
                    format!("model.{key}"),
                    format!(
                        "{v}, but model.init_from ({}) has {key} {have}; remove model.{key}: the checkpoint sets the model's shape",
                        self.dir.display()
                    ),
                ));
            }
            *set = Some(have);
        }
        m.layer_norm_epsilon = s.layer_norm_epsilon;
        Ok(())
    }

    /// Copies the checkpoint's weights into `model`, built with [`Pretrained::shape`].
    /// A tensor missing, extra or of another shape is an error naming the first one.
    pub fn load_into(&self, model: &mut Gpt) -> Result<()> {
        let context = || format!("model.init_from: could not load {}", self.weights.display());
        if self.weights.ends_with(SAFETENSORS) {
            super::load_weights(model, &self.weights).with_context(context)?;
            return Ok(());
        }
        // A torch.save archive of the state dict, read by lavender_export (libtorch's
        // own loader stops at the dict's `_metadata`).
        let loaded = lavender_export::load_state_dict(&self.weights).with_context(context)?;
        let mut tensors = Vec::with_capacity(loaded.len());
        for (name, t) in loaded {
            let kind = match t.dtype() {
                Some(TorchDtype::F32) => tch::Kind::Float,
                Some(TorchDtype::F64) => tch::Kind::Double,
                Some(TorchDtype::F16) => tch::Kind::Half,
                Some(TorchDtype::BF16) => tch::Kind::BFloat16,
                // Integer buffers (old attention masks) are not weights.
                None if super::is_buffer(&name) => continue,
                None => bail!(
                    "{}: tensor {name} holds {} values; a GPT-2's weights are floating point",
                    self.weights.display(),
                    t.storage
                ),
            };
            let shape: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
            let tensor =
                tch::Tensor::from_data_size(&t.data, &shape, kind).to_kind(tch::Kind::Float);
            tensors.push((name, tensor));
        }
        load_named(model, tensors, &self.weights).with_context(context)
    }
}

/// The shape of a GPT-2 `config.json`, refusing the variants lavender's block does not
/// compute (another activation, untied head, another MLP width, other attention scaling).
fn read_shape(path: &Path) -> Result<Shape> {
    let shown = path.display();
    let bytes = std::fs::read(path).with_context(|| format!("could not read {shown}"))?;
    let v: Value =
        serde_json::from_slice(&bytes).map_err(|e| anyhow::anyhow!("{shown} is not JSON ({e})"))?;
    let model_type = v.get("model_type").and_then(Value::as_str).unwrap_or("");
    ensure!(
        model_type == "gpt2",
        "{shown} has model_type {model_type:?}; lavender trains GPT-2 (model_type \"gpt2\", GPT2LMHeadModel)"
    );
    let dims = lavender_export::ModelDims::from_config_json(&v)
        .map_err(|key| anyhow::anyhow!("{shown} has no positive integer {key:?}"))?;
    let small = |n: u64, key: &str| {
        u32::try_from(n).with_context(|| format!("{shown}: {key} {n} is too large"))
    };
    let shape = Shape {
        vocab_size: small(dims.vocab_size, "vocab_size")?,
        n_positions: small(dims.n_positions, "n_positions")?,
        n_embd: small(dims.n_embd, "n_embd")?,
        n_layer: small(dims.n_layer, "n_layer")?,
        n_head: small(dims.n_head, "n_head")?,
        layer_norm_epsilon: dims.layer_norm_epsilon,
    };
    ensure!(
        shape.n_embd.is_multiple_of(shape.n_head),
        "{shown}: n_embd {} is not a multiple of n_head {}",
        shape.n_embd,
        shape.n_head
    );
    let differs = |key: &str, ok: &dyn Fn(&Value) -> bool| -> Result<()> {
        match v.get(key) {
            Some(value) if !ok(value) => bail!(
                "{shown} has {key}: {value}, which lavender's GPT-2 block does not compute; start from a standard GPT-2 configuration"
            ),
            _ => Ok(()),
        }
    };
    differs("activation_function", &|x| {
        matches!(x.as_str(), Some("gelu_new" | "gelu_pytorch_tanh"))
    })?;
    differs("tie_word_embeddings", &|x| x.as_bool() != Some(false))?;
    differs("n_inner", &|x| {
        x.is_null() || x.as_u64() == Some(4 * u64::from(shape.n_embd))
    })?;
    differs("scale_attn_weights", &|x| x.as_bool() != Some(false))?;
    differs("scale_attn_by_inverse_layer_idx", &|x| {
        x.as_bool() != Some(true)
    })?;
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(d.path().join(name), text).unwrap();
        }
        d
    }

    const CONFIG: &str = r#"{"model_type": "gpt2", "vocab_size": 300, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}"#;

    #[test]
    fn a_directory_that_is_not_a_checkpoint_says_which_file_is_missing() {
        let err = |d: &tempfile::TempDir| format!("{:#}", Pretrained::open(d.path()).unwrap_err());
        let d = dir_with(&[]);
        assert!(err(&d).contains("config.json is missing"), "{}", err(&d));
        let d = dir_with(&[("config.json", CONFIG)]);
        assert!(
            err(&d).contains("model.safetensors (or pytorch_model.bin) is missing"),
            "{}",
            err(&d)
        );
        let d = dir_with(&[("config.json", CONFIG), ("model.safetensors", "")]);
        assert!(err(&d).contains("tokenizer.json is missing"), "{}", err(&d));
        let d = dir_with(&[
            ("config.json", &CONFIG.replace("gpt2", "llama")),
            ("model.safetensors", ""),
        ]);
        assert!(err(&d).contains("model_type \"llama\""), "{}", err(&d));
        let d = dir_with(&[("config.json", &CONFIG.replace("gelu_new", "relu"))]);
        assert!(
            err(&d).contains("activation_function: \"relu\""),
            "{}",
            err(&d)
        );
        let d = dir_with(&[
            ("config.json", CONFIG),
            ("pytorch_model.bin", ""),
            ("tokenizer.json", "{}"),
        ]);
        let p = Pretrained::open(d.path()).unwrap();
        assert!(p.weights.ends_with(TORCH_BIN));
        assert_eq!(
            (p.shape.vocab_size, p.shape.n_layer, p.shape.n_positions),
            (300, 2, 64)
        );
    }

    #[test]
    fn the_checkpoint_sets_the_shape_and_a_contradicting_key_is_named() {
        let d = dir_with(&[
            ("config.json", CONFIG),
            ("model.safetensors", ""),
            ("tokenizer.json", "{}"),
        ]);
        let p = Pretrained::open(d.path()).unwrap();
        let mut c = Config::default();
        p.shape_config(&mut c).unwrap();
        let size = c.model_size();
        assert_eq!(
            (size.n_layer, size.n_head, size.n_embd, size.n_positions),
            (2, 4, 32, 64)
        );
        let mut c = Config::default();
        c.model.n_layer = Some(6);
        let err = p.shape_config(&mut c).unwrap_err();
        assert_eq!(err.path(), Some("model.n_layer"));
        let err = err.to_string();
        assert!(
            err.contains("model.n_layer: 6, but") && err.contains("has n_layer 2"),
            "{err}"
        );
    }
}
