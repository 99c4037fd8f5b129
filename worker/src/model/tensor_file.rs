//! Reading and writing named `f32` tensors as `.safetensors` (weights and optimizer
//! moments share this).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{Context, Result, bail};
use safetensors::tensor::{Dtype, SafeTensors, View};
use tch::{Device, Kind, Tensor};

/// A tensor as little-endian `f32` bytes, written straight from its memory: a
/// contiguous `f32` CPU tensor (the usual case) is only aliased; another is first
/// made one (moved to the CPU, converted, made contiguous).
struct F32Bytes {
    shape: Vec<usize>,
    /// Contiguous, `f32`, on the CPU; kept alive while its bytes are written.
    tensor: Tensor,
}

impl F32Bytes {
    fn of(t: &Tensor) -> F32Bytes {
        let tensor = t
            .detach()
            .to_device(Device::Cpu)
            .to_kind(Kind::Float)
            .contiguous();
        F32Bytes {
            shape: tensor.size().iter().map(|&d| d as usize).collect(),
            tensor,
        }
    }

    fn len(&self) -> usize {
        self.tensor.numel() * std::mem::size_of::<f32>()
    }

    /// The tensor's own memory.
    fn native_bytes(&self) -> &[u8] {
        let len = self.len();
        if len == 0 {
            return &[];
        }
        // SAFETY: `tensor` is a contiguous f32 CPU tensor, so `data_ptr` (which
        // includes the storage offset) points at `numel` consecutive f32 values; it
        // is owned by `self` (its storage stays allocated for the borrow) and nothing
        // writes to it while the file is written (saving runs between steps).
        unsafe { std::slice::from_raw_parts(self.tensor.data_ptr() as *const u8, len) }
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
        let bytes = self.native_bytes();
        if cfg!(target_endian = "big") {
            let mut swapped = bytes.to_vec();
            for c in swapped.chunks_exact_mut(4) {
                c.reverse();
            }
            Cow::Owned(swapped)
        } else {
            Cow::Borrowed(bytes)
        }
    }
    fn data_len(&self) -> usize {
        self.len()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_transposes_and_other_kinds_are_written_as_their_values() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.safetensors");
        let flat = Tensor::arange(24, (Kind::Float, Device::Cpu));
        // A view at an offset into shared storage (as the optimizer moments are).
        let view = flat.narrow(0, 5, 6).view([2, 3]);
        let transposed = flat.view([4, 6]).transpose(0, 1);
        let double = Tensor::arange(3, (Kind::Double, Device::Cpu)) / 4.0;
        let empty = Tensor::zeros([0, 3], (Kind::Float, Device::Cpu));
        let tensors = [
            ("view".to_string(), &view),
            ("transposed".to_string(), &transposed),
            ("double".to_string(), &double),
            ("empty".to_string(), &empty),
        ];
        write(&path, &tensors, BTreeMap::new()).expect("write");
        let file = TensorFile::read(&path).expect("read");
        for (name, original) in &tensors {
            let read = &file.tensors[name];
            assert_eq!(read.size(), original.size(), "{name}");
            assert!(
                read.equal(&original.to_kind(Kind::Float)),
                "{name}: {read} vs {original}"
            );
        }
        assert_eq!(file.metadata.get("format").map(String::as_str), Some("pt"));
    }
}
