//! TensorBoard event files, written as TensorBoard reads them: TFRecord framing
//! (a little-endian length, its masked CRC-32C, the bytes, their masked CRC-32C)
//! around `tensorflow.Event` protocol buffers, encoded here field by field (a scalar
//! is `Summary.Value.simple_value`; a text is a string tensor tagged for the `text`
//! plugin). No maintained crate writes these without a protobuf toolchain, and the
//! messages used are five fields deep; the CRC is the `crc32c` crate's.
//!
//! One file per writer (`events.out.tfevents.<secs>.<host>.<pid>.lavender`):
//! TensorBoard reads every file of a run's folder, so a daemon restarted later adds
//! a file beside the old one, and [`super::Progress`] keeps its steps from repeating.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};

/// TensorBoard's mask of a record's CRC.
fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord around `data`.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// The records of a file's bytes, each checked; `None` at the first that is torn
/// or whose CRC does not match (the rest is not trusted).
pub fn unframe(mut bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut records = Vec::new();
    while !bytes.is_empty() {
        let len_bytes = bytes.get(..8)?;
        let crc = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
        if crc != masked_crc(len_bytes) {
            return None;
        }
        let len = usize::try_from(u64::from_le_bytes(len_bytes.try_into().ok()?)).ok()?;
        let end = 12usize.checked_add(len)?;
        let data = bytes.get(12..end)?;
        let crc = u32::from_le_bytes(bytes.get(end..end.checked_add(4)?)?.try_into().ok()?);
        if crc != masked_crc(data) {
            return None;
        }
        records.push(data.to_vec());
        bytes = &bytes[end + 4..];
    }
    Some(records)
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u64, wire: u64) {
    varint(out, (field << 3) | wire);
}

fn bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    key(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// `Event { wall_time, step, <rest> }`.
fn event(wall_time: f64, step: u64, rest: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut e = Vec::new();
    key(&mut e, 1, 1);
    e.extend_from_slice(&wall_time.to_le_bytes());
    key(&mut e, 2, 0);
    varint(&mut e, step);
    rest(&mut e);
    e
}

/// The first event of every file: `file_version: "brain.Event:2"`.
pub fn file_version(wall_time: f64) -> Vec<u8> {
    event(wall_time, 0, |e| bytes_field(e, 3, b"brain.Event:2"))
}

/// A scalar: `Event.summary.value { tag, simple_value }`.
pub fn scalar(wall_time: f64, step: u64, tag: &str, value: f32) -> Vec<u8> {
    let mut v = Vec::new();
    bytes_field(&mut v, 1, tag.as_bytes());
    key(&mut v, 2, 5);
    v.extend_from_slice(&value.to_le_bytes());
    summary(wall_time, step, &v)
}

/// A text: `Event.summary.value { tag, metadata { plugin_data { plugin_name:
/// "text" } }, tensor { dtype: DT_STRING, tensor_shape {}, string_val } }`.
pub fn text(wall_time: f64, step: u64, tag: &str, text: &str) -> Vec<u8> {
    let mut plugin = Vec::new();
    bytes_field(&mut plugin, 1, b"text");
    let mut metadata = Vec::new();
    bytes_field(&mut metadata, 1, &plugin);
    let mut tensor = Vec::new();
    key(&mut tensor, 1, 0);
    varint(&mut tensor, 7); // DT_STRING
    bytes_field(&mut tensor, 2, &[]);
    bytes_field(&mut tensor, 8, text.as_bytes());
    let mut v = Vec::new();
    bytes_field(&mut v, 1, tag.as_bytes());
    bytes_field(&mut v, 9, &metadata);
    bytes_field(&mut v, 8, &tensor);
    summary(wall_time, step, &v)
}

fn summary(wall_time: f64, step: u64, value: &[u8]) -> Vec<u8> {
    let mut s = Vec::new();
    bytes_field(&mut s, 1, value);
    event(wall_time, step, |e| bytes_field(e, 5, &s))
}

/// An event file being written.
pub struct EventFile {
    path: PathBuf,
    file: std::fs::File,
}

impl EventFile {
    /// A new file in `folder` (made if missing), its version record written.
    pub fn create(folder: &Path, wall_time: f64) -> Result<EventFile> {
        std::fs::create_dir_all(folder).ctx("create TensorBoard folder", folder)?;
        let host = nix_hostname();
        let name = format!(
            "events.out.tfevents.{:010}.{host}.{}.lavender",
            wall_time as u64,
            std::process::id()
        );
        let path = folder.join(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .ctx("create TensorBoard event file", &path)?;
        let mut f = EventFile { path, file };
        f.append(&[file_version(wall_time)])?;
        Ok(f)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `events`, framed, and flushes them to the file (TensorBoard reads
    /// whole records; a torn last one waits for the rest).
    pub fn append(&mut self, events: &[Vec<u8>]) -> Result<()> {
        let mut bytes = Vec::new();
        for e in events {
            bytes.extend_from_slice(&frame(e));
        }
        self.file
            .write_all(&bytes)
            .ctx("write TensorBoard event file", &self.path)?;
        self.file
            .sync_data()
            .ctx("write TensorBoard event file", &self.path)
    }
}

/// This machine's name, as in TensorBoard's file names (`[A-Za-z0-9.-]` kept).
fn nix_hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        .take(64)
        .collect();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}
