//! A Hugging Face `datasets` folder written by `save_to_disk`: a Dataset (its
//! `state.json` lists its Arrow IPC files in order) or a DatasetDict
//! (`dataset_dict.json` names its splits, each a Dataset folder). Each row of the text
//! column is a document; the files are read a record batch at a time with `arrow-ipc`.

use std::cell::Cell;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context, Result, bail};
use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use serde::Deserialize;

use super::{Place, Record, RecordFile, list_names};

const STATE: &str = "state.json";
const DATASET_DICT: &str = "dataset_dict.json";
/// The split a DatasetDict source reads unless it names one.
pub const DEFAULT_SPLIT: &str = "train";

#[derive(Deserialize)]
struct State {
    #[serde(rename = "_data_files")]
    data_files: Vec<DataFile>,
}

#[derive(Deserialize)]
struct DataFile {
    filename: String,
}

#[derive(Deserialize)]
struct DatasetDict {
    splits: Vec<String>,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path, what: &str) -> Result<T> {
    let bytes =
        std::fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a `datasets` {what} ({e}); write the folder again with save_to_disk",
            path.display()
        )
    })
}

/// The Arrow files of the Dataset at `dir` (of its `split` when `dir` is a
/// DatasetDict), in order.
pub fn data_files(dir: &Path, split: Option<&str>) -> Result<Vec<PathBuf>> {
    let dict = dir.join(DATASET_DICT);
    let dataset = if dict.is_file() {
        let d: DatasetDict = read_json(&dict, "dataset_dict.json")?;
        let split = split.unwrap_or(DEFAULT_SPLIT);
        if !d.splits.iter().any(|s| s == split) {
            bail!(
                "{} has no split {split:?} (its splits: {}); set the source's `split:` to one of them",
                dir.display(),
                list_names(d.splits.iter().map(String::as_str))
            );
        }
        dir.join(split)
    } else {
        dir.to_path_buf()
    };
    let state = dataset.join(STATE);
    if !state.is_file() {
        bail!(
            "{} is not a `datasets` folder written by save_to_disk: {STATE} (a Dataset's) and {DATASET_DICT} (a DatasetDict's) are both missing; point the source at the folder save_to_disk wrote",
            dataset.display()
        );
    }
    let st: State = read_json(&state, STATE)?;
    if st.data_files.is_empty() {
        bail!(
            "{} lists no data files; the Dataset is empty",
            state.display()
        );
    }
    st.data_files
        .into_iter()
        .map(|f| {
            let p = dataset.join(&f.filename);
            if p.is_file() {
                Ok(p)
            } else {
                bail!(
                    "{} lists {}, which is missing; copy the whole folder again",
                    state.display(),
                    f.filename
                )
            }
        })
        .collect()
}

/// An Arrow IPC file or stream (datasets writes streams), one batch at a time.
enum Batches {
    File(FileReader<BufReader<File>>),
    Stream(StreamReader<BufReader<File>>),
}

impl Batches {
    fn open(path: &Path) -> Result<Batches, ArrowError> {
        let mut f = File::open(path)?;
        let mut magic = [0u8; 6];
        let is_file = f.read_exact(&mut magic).is_ok() && &magic == b"ARROW1";
        f.seek(SeekFrom::Start(0))?;
        Ok(if is_file {
            Batches::File(FileReader::try_new_buffered(f, None)?)
        } else {
            Batches::Stream(StreamReader::try_new_buffered(f, None)?)
        })
    }

    fn schema(&self) -> SchemaRef {
        match self {
            Batches::File(r) => r.schema(),
            Batches::Stream(r) => r.schema(),
        }
    }

    fn next_batch(&mut self) -> Option<Result<RecordBatch, ArrowError>> {
        match self {
            Batches::File(r) => r.next(),
            Batches::Stream(r) => r.next(),
        }
    }
}

pub(super) fn read(
    file: &RecordFile,
    read_bytes: &Rc<Cell<u64>>,
    on_record: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let path = &file.path;
    let damaged = |e: ArrowError| {
        anyhow::anyhow!(
            "{} is not a readable Arrow IPC file ({e}); write the folder again with save_to_disk",
            path.display()
        )
    };
    let mut batches = Batches::open(path).map_err(damaged)?;
    let schema = batches.schema();
    let names = || list_names(schema.fields().iter().map(|f| f.name().as_str()));
    let Some((index, field)) = schema.column_with_name(&file.key) else {
        bail!(
            "{} has no column {:?} (its columns: {}); set the source's `field:` to the one holding the text",
            path.display(),
            file.key,
            names()
        );
    };
    if !matches!(
        field.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        bail!(
            "{}: column {:?} holds {}; expected a string column (its columns: {}); set the source's `field:` to the one holding the text",
            path.display(),
            file.key,
            field.data_type(),
            names()
        );
    }
    let mut batch_no = 0;
    while let Some(batch) = batches.next_batch() {
        let batch = batch.map_err(|e| {
            anyhow::anyhow!(
                "{}: record batch {batch_no} cannot be read ({e}); the file is truncated or damaged: write the folder again with save_to_disk",
                path.display()
            )
        })?;
        let col = batch.column(index);
        for row in 0..col.len() {
            let at = Place::BatchRow {
                batch: batch_no,
                row,
            };
            if col.is_null(row) {
                let reason = format!("column {:?} is null; expected a string", file.key);
                on_record(Record::Bad { at, reason })?;
                continue;
            }
            let text = if let Some(a) = col.as_string_opt::<i32>() {
                a.value(row)
            } else if let Some(a) = col.as_string_opt::<i64>() {
                a.value(row)
            } else if let Some(a) = col.as_string_view_opt() {
                a.value(row)
            } else {
                bail!(
                    "{}: record batch {batch_no}: column {:?} is not a string array",
                    path.display(),
                    file.key
                );
            };
            on_record(Record::Text(text))?;
        }
        batch_no += 1;
    }
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    read_bytes.set(read_bytes.get() + size);
    Ok(())
}
