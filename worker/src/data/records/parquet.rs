//! Parquet: each row of the text column is a document. Read through the column reader
//! of the `parquet` crate, a row group at a time and a page at a time within it, so
//! only the one column is decoded and memory stays at a page, whatever the file's
//! size; dictionary pages and the snappy, gzip and zstd codecs are the crate's.

use std::cell::Cell;
use std::fs::File;
use std::rc::Rc;

use ::parquet::basic::{ConvertedType, Type as PhysicalType};
use ::parquet::column::reader::ColumnReader;
use ::parquet::data_type::ByteArray;
use ::parquet::file::reader::{FileReader, SerializedFileReader};
use ::parquet::schema::types::ColumnDescriptor;
use anyhow::{Context, Result, bail};

use super::{Place, Record, RecordFile, list_names};

/// Rows decoded per read: a few pages' worth of short documents.
const BATCH: usize = 1024;

pub(super) fn read(
    file: &RecordFile,
    read_bytes: &Rc<Cell<u64>>,
    on_record: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let path = &file.path;
    let f = File::open(path).with_context(|| format!("could not open {}", path.display()))?;
    let reader = SerializedFileReader::new(f).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a readable Parquet file ({e}); copy it again, or give the source the format its files have",
            path.display()
        )
    })?;
    let meta = reader.metadata();
    let schema = meta.file_metadata().schema_descr();
    let top: Vec<&str> = schema
        .root_schema()
        .get_fields()
        .iter()
        .map(|f| f.name())
        .collect();
    let Some(index) =
        (0..schema.num_columns()).find(|&i| schema.column(i).path().parts() == [file.key.as_str()])
    else {
        bail!(
            "{} has no column {:?} (its columns: {}); set the source's `column:` to the one holding the text",
            path.display(),
            file.key,
            list_names(top)
        );
    };
    let column = schema.column(index);
    if let Some(kind) = not_text(&column) {
        bail!(
            "{}: column {:?} holds {kind}; expected a string column (its columns: {}); set the source's `column:` to the one holding the text",
            path.display(),
            file.key,
            list_names(top)
        );
    }
    let nullable = column.max_def_level() > 0;
    let mut values: Vec<ByteArray> = Vec::with_capacity(BATCH);
    let mut levels: Vec<i16> = Vec::with_capacity(BATCH);
    for group in 0..reader.num_row_groups() {
        let damaged = |e: ::parquet::errors::ParquetError| {
            anyhow::anyhow!(
                "{}: row group {group} of column {:?} cannot be read ({e}); the file is damaged: copy it again",
                path.display(),
                file.key
            )
        };
        let rg = reader.get_row_group(group).map_err(damaged)?;
        let ColumnReader::ByteArrayColumnReader(mut col) =
            rg.get_column_reader(index).map_err(damaged)?
        else {
            bail!(
                "{}: column {:?} is not a byte-array column",
                path.display(),
                file.key
            );
        };
        let mut row = 0usize;
        loop {
            values.clear();
            levels.clear();
            let (records, _, _) = col
                .read_records(BATCH, nullable.then_some(&mut levels), None, &mut values)
                .map_err(damaged)?;
            if records == 0 {
                break;
            }
            let mut next_value = values.iter();
            // A level below the maximum is a null row (levels are read only when nullable).
            let is_null = |i: usize| levels.get(i).is_some_and(|&l| l < column.max_def_level());
            for i in 0..records {
                let at = Place::Row {
                    group,
                    row: row + i,
                };
                if is_null(i) {
                    let reason = format!("column {:?} is null; expected a string", file.key);
                    on_record(Record::Bad { at, reason })?;
                    continue;
                }
                let bytes = next_value.next().map(ByteArray::data).unwrap_or_default();
                match std::str::from_utf8(bytes) {
                    Ok(text) => on_record(Record::Text(text))?,
                    Err(e) => {
                        let reason = format!(
                            "column {:?} is not UTF-8 text ({e}); expected a string",
                            file.key
                        );
                        on_record(Record::Bad { at, reason })?;
                    }
                }
            }
            row += records;
        }
        read_bytes.set(read_bytes.get() + meta.row_group(group).compressed_size().max(0) as u64);
    }
    Ok(())
}

/// What the column holds, when that cannot be text (byte arrays can: strings, or
/// binary that is checked for UTF-8 row by row).
fn not_text(c: &ColumnDescriptor) -> Option<String> {
    if c.max_rep_level() > 0 {
        return Some("lists (a repeated column)".into());
    }
    if c.physical_type() == PhysicalType::BYTE_ARRAY {
        return None;
    }
    let logical = c
        .logical_type_ref()
        .map(|l| format!(" ({l:?})"))
        .or_else(|| {
            (c.converted_type() != ConvertedType::NONE)
                .then(|| format!(" ({})", c.converted_type()))
        })
        .unwrap_or_default();
    Some(format!("{} values{logical}", c.physical_type()))
}
