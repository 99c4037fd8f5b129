//! Sources whose every record is one document: the lines of JSONL files, the rows of
//! Parquet files and of a `datasets` folder's Arrow IPC files. Each reader streams its
//! file (a line, a Parquet page, an Arrow record batch at a time), so memory is bounded
//! by the largest record or batch, whatever the file's size. A record that cannot be a
//! document comes back as [`Record::Bad`] with its place and what was expected; the
//! caller decides (`data.on_bad_record`). A file that is not of its format at all is an
//! error.

pub mod compressed;
pub mod datasets;
mod jsonl;
mod parquet;

use std::cell::Cell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::Result;
use lavender::config::{Compression, SourceFormat};

/// Where a record sits in its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A JSONL line, 1-based.
    Line(u64),
    /// A Parquet row: its row group and its row within the group, 0-based as Parquet
    /// tools count them.
    Row { group: usize, row: usize },
    /// A row of an Arrow IPC file: its record batch and its row within the batch.
    BatchRow { batch: usize, row: usize },
}

impl Place {
    /// `file:12` for a line, `file, row group 2, row 17` for a row.
    pub fn in_file(&self, file: &Path) -> String {
        match self {
            Place::Line(n) => format!("{}:{n}", file.display()),
            _ => format!("{}, {self}", file.display()),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Line(n) => write!(f, "line {n}"),
            Place::Row { group, row } => write!(f, "row group {group}, row {row}"),
            Place::BatchRow { batch, row } => write!(f, "record batch {batch}, row {row}"),
        }
    }
}

/// One record as read.
pub enum Record<'a> {
    /// The document's text (possibly empty: the caller drops empty documents).
    Text(&'a str),
    /// Not a document: where it is and what was wrong.
    Bad { at: Place, reason: String },
}

/// The formats whose records are documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFormat {
    Jsonl,
    Parquet,
    /// The Arrow IPC files of a `datasets` folder.
    Arrow,
}

impl RecordFormat {
    /// The record format of a source format; `None` for text, which is split instead.
    pub fn of(format: SourceFormat) -> Option<RecordFormat> {
        match format {
            SourceFormat::Text => None,
            SourceFormat::Jsonl => Some(RecordFormat::Jsonl),
            SourceFormat::Parquet => Some(RecordFormat::Parquet),
            SourceFormat::Datasets => Some(RecordFormat::Arrow),
        }
    }
}

/// A file of a record source and how to read it.
#[derive(Debug, Clone)]
pub struct RecordFile {
    pub path: PathBuf,
    pub format: RecordFormat,
    /// Whole-file compression (JSONL only).
    pub compression: Compression,
    /// The JSON field, Parquet column or Arrow column holding the text.
    pub key: String,
}

impl RecordFile {
    /// Reads every record in order. `read_bytes` grows with the bytes read from the
    /// file (compressed), for progress.
    pub fn read(
        &self,
        read_bytes: &Rc<Cell<u64>>,
        on_record: &mut dyn FnMut(Record) -> Result<()>,
    ) -> Result<()> {
        match self.format {
            RecordFormat::Jsonl => jsonl::read(self, read_bytes, on_record),
            RecordFormat::Parquet => parquet::read(self, read_bytes, on_record),
            RecordFormat::Arrow => datasets::read(self, read_bytes, on_record),
        }
    }
}

/// `names` for a message: `a, b, c` (at most 20, then how many more).
pub(crate) fn list_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    if names.is_empty() {
        return "none".into();
    }
    let mut s = names
        .iter()
        .take(20)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 20 {
        s.push_str(&format!(" and {} more", names.len() - 20));
    }
    s
}
