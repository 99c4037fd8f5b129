//! The checkpoint's tensor files: the weights (rewritten with the header Hugging Face
//! expects) and the optimizer moments (checked, then copied byte for byte).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors};

use crate::error::{ExportError, Result};
use crate::torch_save;
use lavender::error::IoContext;

/// Tied to `transformer.wte.weight`; Hugging Face re-ties it on load.
const LM_HEAD: &str = "lm_head.weight";
const WTE: &str = "transformer.wte.weight";
const WPE: &str = "transformer.wpe.weight";
/// Keys every optimizer file must carry in its metadata.
const OPTIMIZER_META: [&str; 4] = ["step", "betas", "eps", "weight_decay"];

/// What the weights file says about the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    pub vocab_size: u64,
    pub n_embd: u64,
    pub n_positions: u64,
    pub n_layer: u64,
    /// `torch_dtype` for `config.json`.
    pub dtype: &'static str,
    /// Parameter name → shape, `lm_head` excluded.
    pub params: BTreeMap<String, Vec<usize>>,
}

/// The optimizer file's step and metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Moments {
    pub step: u64,
    pub metadata: BTreeMap<String, String>,
    pub bytes: Vec<u8>,
}

fn parse<'a>(bytes: &'a [u8], path: &Path) -> Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes)
        .map_err(|e| ExportError::invalid(path, format!("not a valid .safetensors file: {e}")))
}

fn metadata(bytes: &[u8], path: &Path) -> Result<BTreeMap<String, String>> {
    let (_, header) = SafeTensors::read_metadata(bytes)
        .map_err(|e| ExportError::invalid(path, format!("unreadable header: {e}")))?;
    Ok(header
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect())
}

fn dtype_name(d: Dtype) -> Option<&'static str> {
    match d {
        Dtype::F32 => Some("float32"),
        Dtype::F16 => Some("float16"),
        Dtype::BF16 => Some("bfloat16"),
        Dtype::F64 => Some("float64"),
        _ => None,
    }
}

/// The parameter names of a GPT-2 with `n_layer` blocks, as Hugging Face names them.
fn gpt2_names(n_layer: u64) -> BTreeSet<String> {
    hf_parameter_order(n_layer).into_iter().collect()
}

fn layer_of(name: &str) -> Option<u64> {
    name.strip_prefix("transformer.h.")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// Checks that `st` holds exactly a GPT-2 under Hugging Face names and reads its shape.
fn weights_of(st: &SafeTensors<'_>, path: &Path) -> Result<Weights> {
    let mut params = BTreeMap::new();
    let mut dtype = None;
    for (name, view) in st.iter() {
        if name == LM_HEAD {
            continue;
        }
        let d = dtype_name(view.dtype()).ok_or_else(|| {
            ExportError::invalid(
                path,
                format!(
                    "tensor {name} has dtype {:?}; weights must be floating point",
                    view.dtype()
                ),
            )
        })?;
        match dtype {
            None => dtype = Some(d),
            Some(prev) if prev != d => {
                return Err(ExportError::invalid(
                    path,
                    format!("mixes {prev} and {d} tensors ({name}); a model has one dtype"),
                ));
            }
            Some(_) => {}
        }
        params.insert(name.to_string(), view.shape().to_vec());
    }
    let shape2 = |name: &str| -> Result<(u64, u64)> {
        match params.get(name).map(Vec::as_slice) {
            Some([a, b]) => Ok((*a as u64, *b as u64)),
            Some(other) => Err(ExportError::invalid(
                path,
                format!("{name} has shape {other:?}, expected 2 dimensions"),
            )),
            None => Err(ExportError::invalid(
                path,
                format!("has no {name}; is it a lavender GPT-2 checkpoint?"),
            )),
        }
    };
    let (vocab_size, n_embd) = shape2(WTE)?;
    let (n_positions, wpe_embd) = shape2(WPE)?;
    if wpe_embd != n_embd {
        return Err(ExportError::invalid(
            path,
            format!("{WPE} is {wpe_embd} wide but {WTE} is {n_embd}"),
        ));
    }
    let n_layer = params
        .keys()
        .filter_map(|n| layer_of(n))
        .max()
        .map_or(0, |m| m + 1);
    let expected = gpt2_names(n_layer);
    let have: BTreeSet<String> = params.keys().cloned().collect();
    if let Some(extra) = have.difference(&expected).next() {
        return Err(ExportError::invalid(
            path,
            format!("has tensor {extra}, which a GPT-2 with {n_layer} layers does not have"),
        ));
    }
    if let Some(missing) = expected.difference(&have).next() {
        return Err(ExportError::invalid(
            path,
            format!("has no {missing}; the checkpoint is incomplete"),
        ));
    }
    Ok(Weights {
        vocab_size,
        n_embd,
        n_positions,
        n_layer,
        dtype: dtype.unwrap_or("float32"),
        params,
    })
}

/// Reads the weights at `path` for their shape, without copying them.
pub fn inspect_model(path: &Path) -> Result<Weights> {
    let bytes = std::fs::read(path).ctx("read", path)?;
    weights_of(&parse(&bytes, path)?, path)
}

/// Writes the weights of `src` to `dst` as Hugging Face loads them: the same
/// tensors under the same names, header metadata exactly `{"format": "pt"}`, no
/// `lm_head` (it is tied).
pub fn write_hf_model(src: &Path, dst: &Path) -> Result<Weights> {
    let bytes = std::fs::read(src).ctx("read", src)?;
    let st = parse(&bytes, src)?;
    let weights = weights_of(&st, src)?;
    let tensors: Vec<(String, _)> = st
        .tensors()
        .into_iter()
        .filter(|(name, _)| name != LM_HEAD)
        .collect();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(tensors, Some(meta), dst)
        .map_err(|e| ExportError::invalid(dst, format!("could not write: {e}")))?;
    Ok(weights)
}

/// Reads an optimizer file and checks it holds `exp_avg` and `exp_avg_sq` for every
/// parameter of `weights` (same shapes) and the metadata attribution needs.
pub fn read_moments(path: &Path, weights: &Weights) -> Result<Moments> {
    let bytes = std::fs::read(path).ctx("read", path)?;
    let metadata = {
        let st = parse(&bytes, path)?;
        let shapes: BTreeMap<String, Vec<usize>> = st
            .iter()
            .map(|(n, v)| (n.to_string(), v.shape().to_vec()))
            .collect();
        for (param, shape) in &weights.params {
            for moment in ["exp_avg", "exp_avg_sq"] {
                let name = format!("{param}.{moment}");
                match shapes.get(&name) {
                    Some(s) if s == shape => {}
                    Some(s) => {
                        return Err(ExportError::invalid(
                            path,
                            format!("{name} has shape {s:?}, the parameter has {shape:?}"),
                        ));
                    }
                    None => {
                        return Err(ExportError::invalid(
                            path,
                            format!("has no {name}; the moments are not this model's"),
                        ));
                    }
                }
            }
        }
        metadata(&bytes, path)?
    };
    for key in OPTIMIZER_META {
        if !metadata.contains_key(key) {
            return Err(ExportError::invalid(
                path,
                format!("has no {key:?} in its metadata (expected step, betas, eps, weight_decay)"),
            ));
        }
    }
    let step = metadata["step"].parse::<u64>().map_err(|_| {
        ExportError::invalid(
            path,
            format!("metadata step = {:?} is not a step count", metadata["step"]),
        )
    })?;
    Ok(Moments {
        step,
        metadata,
        bytes,
    })
}

/// GPT-2's parameter names in `GPT2LMHeadModel.named_parameters()` order (the tied
/// `lm_head` is not listed): the indices of an optimizer's `state_dict()`.
pub fn hf_parameter_order(n_layer: u64) -> Vec<String> {
    let mut names = vec![WTE.to_string(), WPE.to_string()];
    for i in 0..n_layer {
        for part in [
            "ln_1",
            "attn.c_attn",
            "attn.c_proj",
            "ln_2",
            "mlp.c_fc",
            "mlp.c_proj",
        ] {
            for kind in ["weight", "bias"] {
                names.push(format!("transformer.h.{i}.{part}.{kind}"));
            }
        }
    }
    names.push("transformer.ln_f.weight".to_string());
    names.push("transformer.ln_f.bias".to_string());
    names
}

fn torch_dtype(d: Dtype) -> Option<torch_save::Dtype> {
    match d {
        Dtype::F32 => Some(torch_save::Dtype::F32),
        Dtype::F64 => Some(torch_save::Dtype::F64),
        Dtype::F16 => Some(torch_save::Dtype::F16),
        Dtype::BF16 => Some(torch_save::Dtype::BF16),
        _ => None,
    }
}

/// A number from the optimizer file's metadata (`eps`, `weight_decay`, …).
fn meta_f64(m: &Moments, key: &str, path: &Path) -> Result<f64> {
    m.metadata[key].trim().parse::<f64>().map_err(|_| {
        ExportError::invalid(
            path,
            format!("metadata {key} = {:?} is not a number", m.metadata[key]),
        )
    })
}

/// Writes `moments` (read by [`read_moments`] from `src`) to `dst` as torch.optim
/// AdamW's `state_dict()`: `{"state": {i: {"step", "exp_avg", "exp_avg_sq"}},
/// "param_groups": [{"params": [0..n], "lr", "betas", "eps", "weight_decay", …}]}`
/// with `i` in [`hf_parameter_order`], one param group, `lr` the checkpoint's.
pub fn write_optimizer_pt(
    moments: &Moments,
    weights: &Weights,
    lr: f64,
    src: &Path,
    dst: &Path,
) -> Result<()> {
    use torch_save::Py;
    let st = parse(&moments.bytes, src)?;
    let betas: Vec<f64> = serde_json::from_str(&moments.metadata["betas"])
        .ok()
        .filter(|b: &Vec<f64>| b.len() == 2)
        .ok_or_else(|| {
            ExportError::invalid(
                src,
                format!(
                    "metadata betas = {:?} is not a list of two numbers",
                    moments.metadata["betas"]
                ),
            )
        })?;
    let eps = meta_f64(moments, "eps", src)?;
    let weight_decay = meta_f64(moments, "weight_decay", src)?;
    // torch.optim keeps each parameter's step as a float32 scalar tensor.
    let step_bytes = (moments.step as f32).to_le_bytes();
    let names = hf_parameter_order(weights.n_layer);
    let mut views = Vec::with_capacity(names.len());
    for name in &names {
        let mut pair = Vec::with_capacity(2);
        for moment in ["exp_avg", "exp_avg_sq"] {
            let key = format!("{name}.{moment}");
            let view = st.tensor(&key).map_err(|_| {
                ExportError::invalid(
                    src,
                    format!("has no {key}; the moments are not this model's"),
                )
            })?;
            let dtype = torch_dtype(view.dtype()).ok_or_else(|| {
                ExportError::invalid(
                    src,
                    format!(
                        "{key} has dtype {:?}; moments must be floating point",
                        view.dtype()
                    ),
                )
            })?;
            pair.push(torch_save::Tensor {
                dtype,
                shape: view.shape().to_vec(),
                data: view.data(),
            });
        }
        views.push(pair);
    }
    let state: Vec<(Py, Py)> = views
        .into_iter()
        .enumerate()
        .map(|(i, mut pair)| {
            let exp_avg_sq = pair.pop().expect("two moments");
            let exp_avg = pair.pop().expect("two moments");
            let entry = Py::Dict(vec![
                (
                    Py::str("step"),
                    Py::Tensor(torch_save::Tensor {
                        dtype: torch_save::Dtype::F32,
                        shape: vec![],
                        data: &step_bytes,
                    }),
                ),
                (Py::str("exp_avg"), Py::Tensor(exp_avg)),
                (Py::str("exp_avg_sq"), Py::Tensor(exp_avg_sq)),
            ]);
            (Py::Int(i as i64), entry)
        })
        .collect();
    let group = Py::Dict(vec![
        (Py::str("lr"), Py::Float(lr)),
        (
            Py::str("betas"),
            Py::Tuple(vec![Py::Float(betas[0]), Py::Float(betas[1])]),
        ),
        (Py::str("eps"), Py::Float(eps)),
        (Py::str("weight_decay"), Py::Float(weight_decay)),
        (Py::str("amsgrad"), Py::Bool(false)),
        (Py::str("foreach"), Py::None),
        (Py::str("maximize"), Py::Bool(false)),
        (Py::str("capturable"), Py::Bool(false)),
        (Py::str("differentiable"), Py::Bool(false)),
        (Py::str("fused"), Py::None),
        (Py::str("decoupled_weight_decay"), Py::Bool(true)),
        (
            Py::str("params"),
            Py::List((0..names.len()).map(|i| Py::Int(i as i64)).collect()),
        ),
    ]);
    let root = Py::Dict(vec![
        (Py::str("state"), Py::Dict(state)),
        (Py::str("param_groups"), Py::List(vec![group])),
    ]);
    torch_save::save(&root, dst)
}
