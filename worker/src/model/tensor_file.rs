//! Reading and writing named `f32` tensors as `.safetensors` (weights and optimizer
//! moments share this).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{Context, Result, bail};
use safetensors::tensor::{Dtype, SafeTensors, View};
use tch::{Device, Kind, Tensor};

/// A tensor's bytes, copied to the CPU as little-endian `f32`.
struct F32Bytes {
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl F32Bytes {
    fn of(t: &Tensor) -> F32Bytes {
        let t = t
            .detach()
            .to_device(Device::Cpu)
            .to_kind(Kind::Float)
            .contiguous();
        let numel = t.numel();
        let mut bytes = vec![0u8; numel * 4];
        t.copy_data_u8(&mut bytes, numel);
        if cfg!(target_endian = "big") {
            for c in bytes.chunks_exact_mut(4) {
                c.reverse();
            }
        }
        F32Bytes {
            shape: t.size().iter().map(|&d| d as usize).collect(),
            bytes,
        }
    }
}

impl View for &F32Bytes {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// Writes `tensors` (name → tensor) with string `metadata` to `path`.
pub fn write(
    path: &Path,
    tensors: &[(String, &Tensor)],
    metadata: BTreeMap<String, String>,
) -> Result<()> {
    let data: Vec<(String, F32Bytes)> = tensors
        .iter()
        .map(|(n, t)| (n.clone(), F32Bytes::of(t)))
        .collect();
    let views = data.iter().map(|(n, b)| (n.as_str(), b));
    let mut meta: HashMap<String, String> = metadata.into_iter().collect();
    // Hugging Face's loaders require the format key.
    meta.entry("format".into()).or_insert_with(|| "pt".into());
    safetensors::serialize_to_file(views, Some(meta), path)
        .with_context(|| format!("could not write {}", path.display()))
}

/// A loaded `.safetensors` file: tensors by name (on the CPU) and its metadata.
pub struct TensorFile {
    pub tensors: BTreeMap<String, Tensor>,
    pub metadata: BTreeMap<String, String>,
}

impl TensorFile {
    pub fn read(path: &Path) -> Result<TensorFile> {
        let bytes =
            std::fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
        let st = SafeTensors::deserialize(&bytes)
            .with_context(|| format!("{} is not a valid .safetensors file", path.display()))?;
        let (_, header) = SafeTensors::read_metadata(&bytes)
            .with_context(|| format!("{} has an unreadable header", path.display()))?;
        let metadata = header
            .metadata()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let mut tensors = BTreeMap::new();
        for (name, view) in st.tensors() {
            let kind = match view.dtype() {
                Dtype::F32 => Kind::Float,
                Dtype::F16 => Kind::Half,
                Dtype::BF16 => Kind::BFloat16,
                Dtype::F64 => Kind::Double,
                other => bail!(
                    "tensor {name} in {} has dtype {other:?}; only floating-point tensors are expected",
                    path.display()
                ),
            };
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            let t = Tensor::from_data_size(view.data(), &shape, kind).to_kind(Kind::Float);
            tensors.insert(name, t);
        }
        Ok(TensorFile { tensors, metadata })
    }

    pub fn meta_f64(&self, key: &str, path: &Path) -> Result<f64> {
        let v = self
            .metadata
            .get(key)
            .with_context(|| format!("{} has no {key:?} in its metadata", path.display()))?;
        v.parse().with_context(|| {
            format!(
                "{}: metadata {key:?} = {v:?} is not a number",
                path.display()
            )
        })
    }
}
