//! `torch.save`'s file format, written without libtorch: a zip archive (stored, not
//! compressed) holding `data.pkl` — a protocol-2 pickle whose tensors refer to
//! their storages by persistent id — one `data/<key>` record per storage, and
//! `version`/`byteorder`. `torch.load(path, weights_only=True)` reads it: the pickle
//! uses only what that unpickler allows (dicts, lists, tuples, numbers, strings,
//! `torch._utils._rebuild_tensor_v2`, `torch.*Storage`, `collections.OrderedDict`).
//!
//! The container is the `zip` crate's: records start on 64-byte boundaries as torch
//! aligns them (`mmap=True` loads need it); sizes past 4 GiB use zip64.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use zip::CompressionMethod;
use zip::result::ZipError;
use zip::write::SimpleFileOptions;

use crate::error::{ExportError, Result};
use lavender::error::IoContext;

/// Element types a storage can hold, with torch's storage class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F64,
    F16,
    BF16,
}

impl Dtype {
    fn storage_class(self) -> &'static str {
        match self {
            Dtype::F32 => "FloatStorage",
            Dtype::F64 => "DoubleStorage",
            Dtype::F16 => "HalfStorage",
            Dtype::BF16 => "BFloat16Storage",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F64 => 8,
            Dtype::F16 | Dtype::BF16 => 2,
        }
    }
}

/// A contiguous CPU tensor whose little-endian bytes are `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor<'a> {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: &'a [u8],
}

/// A Python value, as far as an optimizer's `state_dict()` needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Py<'a> {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<Py<'a>>),
    List(Vec<Py<'a>>),
    /// Keys in insertion order, as a Python dict keeps them.
    Dict(Vec<(Py<'a>, Py<'a>)>),
    Tensor(Tensor<'a>),
}

impl Py<'_> {
    pub fn str(s: impl Into<String>) -> Self {
        Py::Str(s.into())
    }
}

// Pickle opcodes (protocol 2).
const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const MARK: u8 = b'(';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const BINUNICODE: u8 = b'X';
const EMPTY_TUPLE: u8 = b')';
const TUPLE: u8 = b't';
const EMPTY_LIST: u8 = b']';
const APPENDS: u8 = b'e';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const GLOBAL: u8 = b'c';
const REDUCE: u8 = b'R';
const BINPERSID: u8 = b'Q';

/// The pickle of `root`, and the storages it refers to in key order (`"0"`, `"1"`, …).
fn pickle<'a>(root: &Py<'a>) -> (Vec<u8>, Vec<Tensor<'a>>) {
    let mut p = Pickler {
        out: vec![PROTO, 2],
        storages: Vec::new(),
    };
    p.value(root);
    p.out.push(STOP);
    (p.out, p.storages)
}

struct Pickler<'a> {
    out: Vec<u8>,
    storages: Vec<Tensor<'a>>,
}

impl<'a> Pickler<'a> {
    fn value(&mut self, v: &Py<'a>) {
        match v {
            Py::None => self.out.push(NONE),
            Py::Bool(b) => self.out.push(if *b { NEWTRUE } else { NEWFALSE }),
            Py::Int(i) => self.int(*i),
            Py::Float(f) => {
                self.out.push(BINFLOAT);
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Py::Str(s) => self.string(s),
            Py::Tuple(items) if items.is_empty() => self.out.push(EMPTY_TUPLE),
            Py::Tuple(items) => {
                self.out.push(MARK);
                for i in items {
                    self.value(i);
                }
                self.out.push(TUPLE);
            }
            Py::List(items) => {
                self.out.push(EMPTY_LIST);
                if !items.is_empty() {
                    self.out.push(MARK);
                    for i in items {
                        self.value(i);
                    }
                    self.out.push(APPENDS);
                }
            }
            Py::Dict(entries) => {
                self.out.push(EMPTY_DICT);
                if !entries.is_empty() {
                    self.out.push(MARK);
                    for (k, v) in entries {
                        self.value(k);
                        self.value(v);
                    }
                    self.out.push(SETITEMS);
                }
            }
            Py::Tensor(t) => self.tensor(t),
        }
    }

    fn int(&mut self, i: i64) {
        if (0..256).contains(&i) {
            self.out.extend_from_slice(&[BININT1, i as u8]);
        } else if let Ok(small) = i32::try_from(i) {
            self.out.push(BININT);
            self.out.extend_from_slice(&small.to_le_bytes());
        } else {
            self.out.extend_from_slice(&[LONG1, 8]);
            self.out.extend_from_slice(&i.to_le_bytes());
        }
    }

    fn string(&mut self, s: &str) {
        self.out.push(BINUNICODE);
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
    }

    fn global(&mut self, module: &str, name: &str) {
        self.out.push(GLOBAL);
        self.out.extend_from_slice(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'\n');
    }

    /// `torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())`
    /// with the storage as persistent id `('storage', torch.<T>Storage, key, 'cpu', numel)`.
    fn tensor(&mut self, t: &Tensor<'a>) {
        let key = self.storages.len().to_string();
        let numel: usize = t.shape.iter().product();
        self.storages.push(t.clone());
        self.global("torch._utils", "_rebuild_tensor_v2");
        self.out.push(MARK);
        // The storage.
        self.out.push(MARK);
        self.string("storage");
        self.global("torch", t.dtype.storage_class());
        self.string(&key);
        self.string("cpu");
        self.int(numel as i64);
        self.out.push(TUPLE);
        self.out.push(BINPERSID);
        self.int(0);
        // Size and row-major stride.
        let mut stride = vec![1usize; t.shape.len()];
        for d in (0..t.shape.len().saturating_sub(1)).rev() {
            stride[d] = stride[d + 1] * t.shape[d + 1];
        }
        for dims in [&t.shape, &stride] {
            self.value(&Py::Tuple(
                dims.iter().map(|&d| Py::Int(d as i64)).collect(),
            ));
        }
        self.out.push(NEWFALSE);
        self.global("collections", "OrderedDict");
        self.out.push(EMPTY_TUPLE);
        self.out.push(REDUCE);
        self.out.push(TUPLE);
        self.out.push(REDUCE);
    }
}

/// Writes `root` to `path` as `torch.save` would. Each tensor's bytes must be
/// `numel × dtype size` long.
pub fn save(root: &Py<'_>, path: &Path) -> Result<()> {
    save_with(root, path, false)
}

/// [`save`], optionally with zip64 records even when nothing needs them (tests
/// check that path on small files).
pub(crate) fn save_with(root: &Py<'_>, path: &Path, force_zip64: bool) -> Result<()> {
    let (pkl, storages) = pickle(root);
    for (i, t) in storages.iter().enumerate() {
        let want = t.shape.iter().product::<usize>() * t.dtype.size();
        if t.data.len() != want {
            return Err(ExportError::invalid(
                path,
                format!(
                    "tensor {i} of shape {:?} needs {want} bytes of {:?}, got {}",
                    t.shape,
                    t.dtype,
                    t.data.len()
                ),
            ));
        }
    }
    // torch names the archive's folder after the file.
    let prefix = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty() && s.is_ascii())
        .unwrap_or_else(|| "archive".to_string());
    let file = File::create(path).ctx("create", path)?;
    let zip_err = |e: ZipError| match e {
        ZipError::Io(e) => ExportError::from(lavender::Error::io("write", path, e)),
        e => ExportError::invalid(path, format!("cannot write it as a zip archive: {e}")),
    };
    let mut zip = zip::ZipWriter::new(BufWriter::new(file));
    let mut write = |name: String, data: &[u8]| -> Result<()> {
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .large_file(force_zip64 || data.len() as u64 >= u64::from(u32::MAX))
            // Padded in an extra field with id "FB", as torch's writer does.
            .with_alignment_and_header_id(ALIGN, u16::from_le_bytes(*b"FB"));
        zip.start_file(name, options).map_err(zip_err)?;
        zip.write_all(data).ctx("write", path)?;
        Ok(())
    };
    write(format!("{prefix}/data.pkl"), &pkl)?;
    write(format!("{prefix}/byteorder"), b"little")?;
    for (i, t) in storages.iter().enumerate() {
        write(format!("{prefix}/data/{i}"), t.data)?;
    }
    write(format!("{prefix}/version"), b"3\n")?;
    // Made durable by whoever commits the file (the export's staging fsyncs).
    zip.finish().map_err(zip_err)?.flush().ctx("write", path)?;
    Ok(())
}

/// Records start at multiples of this, as in torch's writer.
const ALIGN: u16 = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_pickle_to_the_expected_opcodes() {
        let (pkl, storages) = pickle(&Py::Dict(vec![
            (Py::str("a"), Py::Int(1)),
            (
                Py::Int(300),
                Py::Tuple(vec![Py::Float(0.5), Py::Bool(false)]),
            ),
            (Py::Int(-1), Py::List(vec![])),
        ]));
        assert!(storages.is_empty());
        let mut want = vec![
            PROTO, 2, EMPTY_DICT, MARK, BINUNICODE, 1, 0, 0, 0, b'a', BININT1, 1,
        ];
        want.extend_from_slice(&[BININT, 0x2c, 0x01, 0, 0, MARK, BINFLOAT]);
        want.extend_from_slice(&0.5f64.to_be_bytes());
        want.extend_from_slice(&[NEWFALSE, TUPLE, BININT, 0xff, 0xff, 0xff, 0xff, EMPTY_LIST]);
        want.extend_from_slice(&[SETITEMS, STOP]);
        assert_eq!(pkl, want);
    }

    #[test]
    fn records_are_aligned_and_a_wrong_length_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![7u8; 4 * 6];
        let t = Py::Tensor(Tensor {
            dtype: Dtype::F32,
            shape: vec![2, 3],
            data: &data,
        });
        let path = dir.path().join("optimizer.pt");
        save(&Py::Dict(vec![(Py::str("t"), t)]), &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        // The storage's bytes start on a 64-byte boundary.
        let at = bytes
            .windows(24)
            .position(|w| w == data.as_slice())
            .unwrap();
        assert_eq!(at % 64, 0);
        assert!(bytes.windows(16).any(|w| w == b"optimizer/data/0"));

        let short = Py::Tensor(Tensor {
            dtype: Dtype::F32,
            shape: vec![2, 3],
            data: &data[..20],
        });
        let err = save(&short, &path).unwrap_err().to_string();
        assert!(err.contains("needs 24 bytes"), "{err}");
    }
}
