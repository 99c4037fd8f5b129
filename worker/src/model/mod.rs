//! The GPT-2 language model, its parameters and their `model.safetensors` file.

pub mod gpt2;
mod inference;
pub mod params;
pub mod pretrained;
pub mod tensor_file;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, bail};

pub use gpt2::{Gpt, GptConfig};
pub use inference::load_for_inference;
use tensor_file::TensorFile;

pub const MODEL_FILE: &str = "model.safetensors";

/// Buffers some Hugging Face exports carry that are not parameters.
fn is_buffer(name: &str) -> bool {
    name.ends_with(".attn.bias") && !name.contains("c_attn") || name.ends_with(".attn.masked_bias")
}

/// The model's tensors by parameter name, in its parameter order.
fn named_tensors(model: &Gpt) -> Vec<(String, &tch::Tensor)> {
    model
        .params
        .params
        .iter()
        .map(|p| (p.name.clone(), &p.tensor))
        .collect()
}

/// The weights as a `.safetensors` image in host memory, filled into `image` (its
/// buffer reused; see [`tensor_file::FileImage`]).
pub fn snapshot_weights(model: &Gpt, image: &mut tensor_file::FileImage) -> Result<()> {
    image.fill(&named_tensors(model), BTreeMap::new())
}

/// Writes the weights with extra string metadata in the file's header.
pub fn save_weights_with(
    model: &Gpt,
    path: &Path,
    metadata: BTreeMap<String, String>,
) -> Result<()> {
    tensor_file::write(path, &named_tensors(model), metadata)
}

/// Loads weights written by [`snapshot_weights`] or by Hugging Face (`transformer.`
/// prefix optional, attention-mask buffers and a tied `lm_head.weight` ignored).
/// Returns the file's metadata.
pub fn load_weights(model: &mut Gpt, path: &Path) -> Result<BTreeMap<String, String>> {
    let file = TensorFile::read(path)?;
    load_named(model, file.tensors, path)?;
    Ok(file.metadata)
}

/// Copies named tensors (Hugging Face names, `transformer.` prefix optional) from
/// `path` into `model`; attention-mask buffers and a tied `lm_head.weight` are ignored.
/// A tensor missing, extra or of another shape is an error naming the first one.
fn load_named(
    model: &mut Gpt,
    tensors: impl IntoIterator<Item = (String, tch::Tensor)>,
    path: &Path,
) -> Result<()> {
    let mut found: BTreeMap<String, tch::Tensor> = BTreeMap::new();
    for (name, t) in tensors {
        if is_buffer(&name) || name == "lm_head.weight" {
            continue;
        }
        let full = if name.starts_with("transformer.") {
            name
        } else {
            format!("transformer.{name}")
        };
        found.insert(full, t);
    }
    let _guard = tch::no_grad_guard();
    for p in &mut model.params.params {
        let Some(t) = found.remove(&p.name) else {
            bail!(
                "{} has no tensor {} (is it from a model with another n_layer?)",
                path.display(),
                p.name
            );
        };
        if t.size() != p.shape {
            bail!(
                "{}: {} has shape {:?}, this model expects {:?} (check model.n_embd/n_positions and the tokenizer's vocabulary)",
                path.display(),
                p.name,
                t.size(),
                p.shape
            );
        }
        p.tensor.copy_(&t.to_device(p.tensor.device()));
    }
    if let Some(extra) = found.keys().next() {
        bail!(
            "{} has tensor {extra} that this model does not have (is it from a model with more layers?)",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind, Tensor};

    pub fn tiny_config() -> GptConfig {
        GptConfig {
            vocab_size: 50,
            n_positions: 16,
            n_embd: 32,
            n_layer: 2,
            n_head: 4,
            dropout: 0.0,
            layer_norm_epsilon: 1e-5,
        }
    }

    #[test]
    fn parameters_have_hugging_face_names_and_conv1d_shapes() {
        let m = Gpt::new(tiny_config(), Device::Cpu).unwrap();
        let shape = |n: &str| {
            m.params
                .get(n)
                .unwrap_or_else(|| panic!("{n}"))
                .shape
                .clone()
        };
        assert_eq!(shape("transformer.wte.weight"), vec![50, 32]);
        assert_eq!(shape("transformer.wpe.weight"), vec![16, 32]);
        assert_eq!(shape("transformer.h.1.attn.c_attn.weight"), vec![32, 96]);
        assert_eq!(shape("transformer.h.1.attn.c_attn.bias"), vec![96]);
        assert_eq!(shape("transformer.h.0.attn.c_proj.weight"), vec![32, 32]);
        assert_eq!(shape("transformer.h.0.mlp.c_fc.weight"), vec![32, 128]);
        assert_eq!(shape("transformer.h.0.mlp.c_proj.weight"), vec![128, 32]);
        assert_eq!(shape("transformer.ln_f.bias"), vec![32]);
        assert!(
            m.params.get("lm_head.weight").is_none(),
            "lm_head is tied, not a parameter"
        );
        assert_eq!(m.params.params.len(), 2 + 12 * 2 + 2);
        // Only the four projection matrices per layer are decayed.
        let decayed: Vec<&str> = m
            .params
            .params
            .iter()
            .filter(|p| p.decay)
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(decayed.len(), 8);
        assert!(
            decayed
                .iter()
                .all(|n| n.ends_with(".weight") && !n.contains("ln_") && !n.contains("wte"))
        );
    }

    #[test]
    fn attention_is_causal() {
        tch::manual_seed(1);
        let m = Gpt::new(tiny_config(), Device::Cpu).unwrap();
        let a = Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6]).view([1, 6]);
        let b = Tensor::from_slice(&[1i64, 2, 3, 9, 9, 9]).view([1, 6]);
        let la = m.forward(&a, false);
        let lb = m.forward(&b, false);
        // Positions 0..3 see only the shared prefix.
        let diff_prefix = (la.narrow(1, 0, 3) - lb.narrow(1, 0, 3))
            .abs()
            .max()
            .double_value(&[]);
        let diff_suffix = (la.narrow(1, 3, 3) - lb.narrow(1, 3, 3))
            .abs()
            .max()
            .double_value(&[]);
        assert!(diff_prefix < 1e-5, "{diff_prefix}");
        assert!(diff_suffix > 1e-4, "{diff_suffix}");
    }

    #[test]
    fn lm_head_is_tied_to_wte() {
        tch::manual_seed(2);
        let m = Gpt::new(tiny_config(), Device::Cpu).unwrap();
        let idx = Tensor::from_slice(&[3i64, 4]).view([1, 2]);
        let h = m.hidden(&idx, false);
        let wte = &m.params.get("transformer.wte.weight").unwrap().tensor;
        let manual = h.matmul(&wte.tr());
        let diff = (m.forward(&idx, false) - manual)
            .abs()
            .max()
            .double_value(&[]);
        assert_eq!(diff, 0.0);
        // A gradient from the head reaches wte.
        let loss = m.forward(&idx, true).sum(Kind::Float);
        loss.backward();
        assert!(wte.grad().abs().sum(Kind::Float).double_value(&[]) > 0.0);
    }

    /// The gradients each parameter holds after `train`, in one flat tensor.
    fn grads_after(train: impl FnOnce(&Gpt) -> f64) -> (f64, Tensor) {
        tch::manual_seed(5);
        let mut m = Gpt::new(tiny_config(), Device::Cpu).unwrap();
        m.params.init_grads().unwrap();
        let loss = train(&m);
        (loss, m.params.flat_grad())
    }

    #[test]
    fn next_token_training_matches_autograd_through_cross_entropy() {
        let idx = Tensor::from_slice(&[3i64, 4, 5, 6, 7, 8, 9, 10]).view([2, 4]);
        // Two ignored positions, one in each row.
        let targets = Tensor::from_slice(&[4i64, 5, -100, 7, -100, 9, 10, 11]).view([2, 4]);
        let (expected_loss, expected) = grads_after(|m| {
            let loss = gpt2::cross_entropy(&m.forward(&idx, true), &targets, -100);
            (&loss * 0.5).backward();
            loss.double_value(&[])
        });
        let (loss, grads) = grads_after(|m| {
            m.train_next_token(&idx, &targets, -100, 0.5)
                .double_value(&[])
        });
        assert!(
            (loss - expected_loss).abs() < 1e-6,
            "{loss} vs {expected_loss}"
        );
        let diff = (&grads - &expected).abs().max().double_value(&[]);
        let size = expected.abs().max().double_value(&[]);
        assert!(size > 1e-3, "the reference gradient is not trivial: {size}");
        assert!(diff < 1e-6 * size.max(1.0), "max difference {diff}");

        // Nothing to learn from: NaN, as the mean over no positions is, and no gradient.
        let none = Tensor::full([2, 4], -100, (Kind::Int64, Device::Cpu));
        let (loss, grads) =
            grads_after(|m| m.train_next_token(&idx, &none, -100, 1.0).double_value(&[]));
        assert!(loss.is_nan());
        assert_eq!(grads.abs().max().double_value(&[]), 0.0);
    }

    /// Under bf16 autocast (the head's products in bf16, its softmax in fp32) the
    /// fused head gives what autograd through autocast's cross-entropy gives, to
    /// bf16's precision, and not fp32's numbers.
    #[test]
    fn next_token_training_under_bf16_autocast_matches_autograd_under_it() {
        use crate::native::{Autocast, HalfKind};
        let idx = Tensor::from_slice(&[3i64, 4, 5, 6, 7, 8, 9, 10]).view([2, 4]);
        let targets = Tensor::from_slice(&[4i64, 5, -100, 7, -100, 9, 10, 11]).view([2, 4]);
        let bf16 = || Autocast::enter(Device::Cpu, HalfKind::BFloat16).unwrap();
        let (expected_loss, expected) = grads_after(|m| {
            let _autocast = bf16();
            let logits = m.forward(&idx, true);
            assert_eq!(logits.kind(), Kind::BFloat16);
            let loss = gpt2::cross_entropy(&logits, &targets, -100);
            (&loss * 0.5).backward();
            loss.double_value(&[])
        });
        let (loss, grads) = grads_after(|m| {
            let _autocast = bf16();
            m.train_next_token(&idx, &targets, -100, 0.5)
                .double_value(&[])
        });
        let (_, fp32) = grads_after(|m| {
            m.train_next_token(&idx, &targets, -100, 0.5)
                .double_value(&[])
        });
        assert_eq!(grads.kind(), Kind::Float, "gradients stay fp32");
        let rel =
            |a: &Tensor, b: &Tensor| (a - b).norm().double_value(&[]) / b.norm().double_value(&[]);
        assert!(
            (loss - expected_loss).abs() < 1e-3 * expected_loss.abs(),
            "{loss} vs {expected_loss}"
        );
        let diff = rel(&grads, &expected);
        assert!(diff < 2e-2, "relative difference {diff}");
        assert!(rel(&grads, &fp32) > 1e-5, "computed as in fp32");
    }

    #[test]
    fn tied_weights_round_trip_through_safetensors() {
        tch::manual_seed(3);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MODEL_FILE);
        let a = Gpt::new(tiny_config(), Device::Cpu).unwrap();
        let mut image = tensor_file::FileImage::default();
        snapshot_weights(&a, &mut image).unwrap();
        image.write(&path).unwrap();
        let file = TensorFile::read(&path).unwrap();
        assert!(!file.tensors.contains_key("lm_head.weight"));
        assert_eq!(file.tensors.len(), a.params.params.len());
        assert_eq!(file.metadata.get("format").map(String::as_str), Some("pt"));

        tch::manual_seed(4);
        let mut b = Gpt::new(tiny_config(), Device::Cpu).unwrap();
        load_weights(&mut b, &path).unwrap();
        assert!(a.params.flat().equal(b.params.flat()));
        let idx = Tensor::from_slice(&[7i64, 8, 9]).view([1, 3]);
        assert!(a.forward(&idx, false).equal(&b.forward(&idx, false)));
    }

    #[test]
    fn loading_a_mismatched_file_names_the_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MODEL_FILE);
        let mut image = tensor_file::FileImage::default();
        snapshot_weights(&Gpt::new(tiny_config(), Device::Cpu).unwrap(), &mut image).unwrap();
        image.write(&path).unwrap();
        let mut cfg = tiny_config();
        cfg.n_embd = 16;
        let err = load_weights(&mut Gpt::new(cfg, Device::Cpu).unwrap(), &path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("c_attn.weight has shape [32, 96]") && err.contains("[16, 48]"),
            "{err}"
        );
    }
}
