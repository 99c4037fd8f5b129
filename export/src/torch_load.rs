//! Reading a `torch.save` archive of a state dict (a Hugging Face `pytorch_model.bin`)
//! without libtorch, whose own loader cannot read one (the dict's `_metadata`
//! attribute stops it): the zip archive's stored records ([`torch_save`]'s layout, read
//! back), and `data.pkl` run through an unpickler that knows only what a state dict
//! pickles — dicts, tuples, numbers, strings, `collections.OrderedDict`,
//! `torch._utils._rebuild_tensor_v2` and `torch.*Storage`, as `torch.load(...,
//! weights_only=True)` allows. Anything else is an error, never code run.
//!
//! [`torch_save`]: crate::torch_save

use std::collections::HashMap;
use std::io::Cursor;
use std::path::Path;

use zip::{CompressionMethod, ZipArchive};

use crate::error::{ExportError, Result};
use crate::torch_save::Dtype;
use lavender::error::IoContext;

/// One tensor of the state dict, made contiguous: little-endian `data` of `shape`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedTensor {
    /// torch's storage class (`FloatStorage`, `LongStorage`, …).
    pub storage: String,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl LoadedTensor {
    /// The element type, when it is a floating-point one.
    pub fn dtype(&self) -> Option<Dtype> {
        match self.storage.as_str() {
            "FloatStorage" => Some(Dtype::F32),
            "DoubleStorage" => Some(Dtype::F64),
            "HalfStorage" => Some(Dtype::F16),
            "BFloat16Storage" => Some(Dtype::BF16),
            _ => None,
        }
    }
}

/// Bytes per element of a storage class.
fn element_size(storage: &str) -> Option<usize> {
    Some(match storage {
        "DoubleStorage" | "LongStorage" => 8,
        "FloatStorage" | "IntStorage" => 4,
        "HalfStorage" | "BFloat16Storage" | "ShortStorage" => 2,
        "ByteStorage" | "CharStorage" | "BoolStorage" => 1,
        _ => return None,
    })
}

/// The named tensors of the state dict `torch.save`d at `path`, in the dict's order.
pub fn load_state_dict(path: &Path) -> Result<Vec<(String, LoadedTensor)>> {
    let bytes = std::fs::read(path).ctx("read", path)?;
    let bad = |reason: String| ExportError::invalid(path, reason);
    let records =
        zip_records(&bytes).map_err(|e| bad(format!("not a torch.save zip archive: {e}")))?;
    let pkl = records
        .keys()
        .find(|k| k.ends_with("/data.pkl") && k.matches('/').count() == 1)
        .ok_or_else(|| {
            bad("a zip archive without <name>/data.pkl: not written by torch.save".into())
        })?
        .clone();
    let prefix = pkl.trim_end_matches("data.pkl");
    let root = Unpickler::new(records[&pkl])
        .run()
        .map_err(|e| bad(format!("data.pkl: {e}")))?;
    let V::Dict(entries) = root else {
        return Err(bad(
            "holds no state dict (its pickle is not a dict of tensors)".into(),
        ));
    };
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let (V::Str(name), V::Tensor(t)) = (k, v) else {
            return Err(bad("holds a dict entry that is not a named tensor".into()));
        };
        let record = format!("{prefix}data/{}", t.key);
        let storage = records
            .get(&record)
            .ok_or_else(|| bad(format!("tensor {name}: record {record} is missing")))?;
        let data = t
            .contiguous(storage)
            .ok_or_else(|| bad(format!("tensor {name} reaches past its storage {record}")))?;
        out.push((
            name,
            LoadedTensor {
                storage: t.storage,
                shape: t.shape,
                data,
            },
        ));
    }
    Ok(out)
}

/// The archive's records by name, each the slice of `b` it is stored in (stored
/// records only: torch never compresses).
fn zip_records(b: &[u8]) -> std::result::Result<HashMap<String, &[u8]>, String> {
    let mut archive = ZipArchive::new(Cursor::new(b)).map_err(|e| e.to_string())?;
    let mut records = HashMap::new();
    for i in 0..archive.len() {
        let record = archive.by_index_raw(i).map_err(|e| e.to_string())?;
        let name = record.name().map_err(|e| e.to_string())?.into_owned();
        if record.compression() != CompressionMethod::Stored {
            return Err(format!(
                "record {name} is compressed ({}), which torch.save never does",
                record.compression()
            ));
        }
        let data = record
            .data_start()
            .and_then(|start| b.get(start as usize..(start + record.size()) as usize))
            .ok_or("truncated or damaged")?;
        records.insert(name, data);
    }
    Ok(records)
}

/// A tensor as the pickle describes it: a view of a storage record.
#[derive(Debug, Clone, PartialEq)]
struct TensorRef {
    storage: String,
    key: String,
    offset: usize,
    shape: Vec<usize>,
    stride: Vec<usize>,
}

impl TensorRef {
    /// The view's elements in row-major order; `None` when it reaches past the storage.
    fn contiguous(&self, storage: &[u8]) -> Option<Vec<u8>> {
        let es = element_size(&self.storage)?;
        let numel: usize = self.shape.iter().product();
        let mut out = Vec::with_capacity(numel * es);
        let mut index = vec![0usize; self.shape.len()];
        for _ in 0..numel {
            let element = self.offset
                + index
                    .iter()
                    .zip(&self.stride)
                    .map(|(i, s)| i * s)
                    .sum::<usize>();
            out.extend_from_slice(storage.get(element * es..(element + 1) * es)?);
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < self.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Some(out)
    }
}

/// What the unpickler's stack holds.
#[derive(Debug, Clone, PartialEq)]
enum V {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<V>),
    List(Vec<V>),
    Dict(Vec<(V, V)>),
    /// `module.name` of a GLOBAL.
    Global(String),
    /// A storage's persistent id: its class and record key.
    Storage {
        class: String,
        key: String,
    },
    Tensor(TensorRef),
    Mark,
}

struct Unpickler<'a> {
    b: &'a [u8],
    at: usize,
    stack: Vec<V>,
    memo: HashMap<u64, V>,
}

type Step<T> = std::result::Result<T, String>;

impl<'a> Unpickler<'a> {
    fn new(b: &'a [u8]) -> Unpickler<'a> {
        Unpickler {
            b,
            at: 0,
            stack: Vec::new(),
            memo: HashMap::new(),
        }
    }

    fn take(&mut self, n: usize) -> Step<&'a [u8]> {
        let s = self.b.get(self.at..self.at + n).ok_or("ends early")?;
        self.at += n;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Step<u64> {
        let mut v = 0u64;
        for (i, &byte) in self.take(n)?.iter().enumerate() {
            v |= (byte as u64) << (8 * i);
        }
        Ok(v)
    }

    fn line(&mut self) -> Step<String> {
        let rest = &self.b[self.at..];
        let end = rest.iter().position(|&c| c == b'\n').ok_or("ends early")?;
        self.at += end + 1;
        Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
    }

    fn pop(&mut self) -> Step<V> {
        self.stack.pop().ok_or_else(|| "pops an empty stack".into())
    }

    /// The items above the topmost mark, which is removed.
    fn pop_mark(&mut self) -> Step<Vec<V>> {
        let mark = self
            .stack
            .iter()
            .rposition(|v| *v == V::Mark)
            .ok_or("has no mark")?;
        let items = self.stack.split_off(mark + 1);
        self.stack.pop();
        Ok(items)
    }

    fn string(&mut self, n: usize) -> Step<()> {
        let s = String::from_utf8_lossy(self.take(n)?).into_owned();
        self.stack.push(V::Str(s));
        Ok(())
    }

    fn run(mut self) -> Step<V> {
        loop {
            let op = self.take(1)?[0];
            match op {
                0x80 => drop(self.take(1)?),      // PROTO
                0x95 => drop(self.take(8)?),      // FRAME
                b'.' => return self.pop(),        // STOP
                b'(' => self.stack.push(V::Mark), // MARK
                b'N' => self.stack.push(V::None),
                0x88 => self.stack.push(V::Bool(true)),
                0x89 => self.stack.push(V::Bool(false)),
                b'K' => {
                    let v = self.uint(1)? as i64;
                    self.stack.push(V::Int(v))
                }
                b'M' => {
                    let v = self.uint(2)? as i64;
                    self.stack.push(V::Int(v))
                }
                b'J' => {
                    let v = self.uint(4)? as u32 as i32 as i64;
                    self.stack.push(V::Int(v))
                }
                0x8a => {
                    // LONG1: n little-endian two's-complement bytes.
                    let n = self.uint(1)? as usize;
                    let bytes = self.take(n)?;
                    if n > 8 {
                        return Err("holds an integer wider than 64 bits".into());
                    }
                    let mut buf = [if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                        0xFF
                    } else {
                        0
                    }; 8];
                    buf[..n].copy_from_slice(bytes);
                    self.stack.push(V::Int(i64::from_le_bytes(buf)));
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes"));
                    self.stack.push(V::Float(v))
                }
                b'X' => {
                    let n = self.uint(4)? as usize;
                    self.string(n)?
                }
                0x8c => {
                    let n = self.uint(1)? as usize;
                    self.string(n)?
                }
                0x8d => {
                    let n = self.uint(8)? as usize;
                    self.string(n)?
                }
                b'}' => self.stack.push(V::Dict(Vec::new())),
                b']' => self.stack.push(V::List(Vec::new())),
                b')' => self.stack.push(V::Tuple(Vec::new())),
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(V::Tuple(items))
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let at = self
                        .stack
                        .len()
                        .checked_sub(n)
                        .ok_or("pops an empty stack")?;
                    let items = self.stack.split_off(at);
                    self.stack.push(V::Tuple(items))
                }
                b'q' | b'r' | 0x94 => {
                    // BINPUT, LONG_BINPUT, MEMOIZE
                    let key = match op {
                        b'q' => self.uint(1)?,
                        b'r' => self.uint(4)?,
                        _ => self.memo.len() as u64,
                    };
                    let top = self.stack.last().ok_or("memoizes an empty stack")?.clone();
                    self.memo.insert(key, top);
                }
                b'h' | b'j' => {
                    let key = if op == b'h' {
                        self.uint(1)?
                    } else {
                        self.uint(4)?
                    };
                    let v = self
                        .memo
                        .get(&key)
                        .ok_or("refers to an unknown memo")?
                        .clone();
                    self.stack.push(v)
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.stack.push(V::Global(format!("{module}.{name}")))
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let storage = match pid {
                        V::Tuple(t) if t.len() >= 3 && t[0] == V::Str("storage".into()) => {
                            match (&t[1], &t[2]) {
                                (V::Global(class), V::Str(key)) => V::Storage {
                                    class: class.trim_start_matches("torch.").to_string(),
                                    key: key.clone(),
                                },
                                _ => return Err("has a storage id it cannot read".into()),
                            }
                        }
                        _ => return Err("has a persistent id that is not a storage".into()),
                    };
                    self.stack.push(storage)
                }
                b'R' => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let v = self.reduce(callable, args)?;
                    self.stack.push(v)
                }
                b'b' => {
                    // BUILD: a state dict's `_metadata` (module versions); not needed.
                    self.pop()?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    match self.stack.last_mut() {
                        Some(V::Dict(d)) => d.push((k, v)),
                        _ => return Err("sets an item on something not a dict".into()),
                    }
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let Some(V::Dict(d)) = self.stack.last_mut() else {
                        return Err("sets items on something not a dict".into());
                    };
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        d.push((k, v));
                    }
                }
                b'a' => {
                    let v = self.pop()?;
                    match self.stack.last_mut() {
                        Some(V::List(l)) => l.push(v),
                        _ => return Err("appends to something not a list".into()),
                    }
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    match self.stack.last_mut() {
                        Some(V::List(l)) => l.extend(items),
                        _ => return Err("appends to something not a list".into()),
                    }
                }
                other => {
                    return Err(format!(
                        "uses pickle opcode {other:#04x} at byte {}, which a state dict does not",
                        self.at - 1
                    ));
                }
            }
        }
    }

    /// The calls a state dict's pickle makes; any other is refused.
    fn reduce(&self, callable: V, args: V) -> Step<V> {
        let V::Global(name) = callable else {
            return Err("calls something that is not a global".into());
        };
        let V::Tuple(args) = args else {
            return Err(format!("calls {name} without an argument tuple"));
        };
        match name.as_str() {
            "collections.OrderedDict" => Ok(V::Dict(Vec::new())),
            "torch._utils._rebuild_tensor_v2" => {
                let dims = |v: &V| -> Step<Vec<usize>> {
                    match v {
                        V::Tuple(d) | V::List(d) => d
                            .iter()
                            .map(|x| match x {
                                V::Int(i) if *i >= 0 => Ok(*i as usize),
                                _ => Err("has a tensor size that is not a count".to_string()),
                            })
                            .collect(),
                        _ => Err("has a tensor size that is not a tuple".into()),
                    }
                };
                match args.as_slice() {
                    [V::Storage { class, key }, V::Int(offset), size, stride, ..] => {
                        Ok(V::Tensor(TensorRef {
                            storage: class.clone(),
                            key: key.clone(),
                            offset: usize::try_from(*offset)
                                .map_err(|_| "has a negative offset")?,
                            shape: dims(size)?,
                            stride: dims(stride)?,
                        }))
                    }
                    _ => Err("rebuilds a tensor from arguments it cannot read".into()),
                }
            }
            other => Err(format!("calls {other}, which a state dict does not")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch_save::{self, Py, Tensor};

    #[test]
    fn what_torch_save_writes_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sd.bin");
        let a: Vec<u8> = (0..6u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let b: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let root = Py::Dict(vec![
            (
                Py::str("w"),
                Py::Tensor(Tensor {
                    dtype: Dtype::F32,
                    shape: vec![2, 3],
                    data: &a,
                }),
            ),
            (
                Py::str("b"),
                Py::Tensor(Tensor {
                    dtype: Dtype::F32,
                    shape: vec![2],
                    data: &b,
                }),
            ),
        ]);
        for zip64 in [false, true] {
            torch_save::save_with(&root, &path, zip64).unwrap();
            let got = load_state_dict(&path).unwrap();
            assert_eq!(got.len(), 2);
            assert_eq!(
                (got[0].0.as_str(), &got[0].1.shape, &got[0].1.data),
                ("w", &vec![2, 3], &a)
            );
            assert_eq!(
                (got[1].0.as_str(), got[1].1.dtype()),
                ("b", Some(Dtype::F32))
            );
            assert_eq!(got[1].1.data, b);
        }
        std::fs::write(&path, b"not a zip").unwrap();
        let err = load_state_dict(&path).unwrap_err().to_string();
        assert!(err.contains("not a torch.save zip archive"), "{err}");
    }

    #[test]
    fn a_strided_view_is_made_contiguous() {
        // A 2x2 transpose of storage [0, 1, 2, 3] read with stride (1, 2), from element 0.
        let storage: Vec<u8> = (0..4u8).collect();
        let t = TensorRef {
            storage: "ByteStorage".into(),
            key: "0".into(),
            offset: 0,
            shape: vec![2, 2],
            stride: vec![1, 2],
        };
        assert_eq!(t.contiguous(&storage).unwrap(), [0, 2, 1, 3]);
        let past = TensorRef { offset: 1, ..t };
        assert_eq!(past.contiguous(&storage), None);
    }
}
