//! `data.sources` items: `{embedded: NAME}`, `{path: PATH, format?, …}` or
//! `{url: URL, sha256: HEX}`.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where the `downloads` step gets corpus text from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// A corpus shipped inside lavender.
    Embedded(EmbeddedCorpus),
    /// Local files: a file, a directory or a glob, in one of the [`SourceFormat`]s.
    Path(PathSource),
    /// A file to download, checked against its SHA-256.
    Url { url: String, sha256: String },
}

/// The corpora shipped in `data/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddedCorpus {
    Tinyshakespeare,
}

impl EmbeddedCorpus {
    pub fn as_str(self) -> &'static str {
        match self {
            EmbeddedCorpus::Tinyshakespeare => "tinyshakespeare",
        }
    }
}

impl fmt::Display for EmbeddedCorpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A local source: a file, a directory (read recursively) or a glob (`dumps/*.jsonl.gz`),
/// and how its files hold documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSource {
    pub path: PathBuf,
    pub format: SourceFormat,
    /// Whole-file compression of `text` and `jsonl` files.
    pub compression: Compression,
    /// The JSON field (`jsonl`) or Arrow column (`datasets`) holding the text; `None` =
    /// `text`.
    pub field: Option<String>,
    /// The Parquet column holding the text; `None` = `text`.
    pub column: Option<String>,
    /// The split of a `datasets` DatasetDict folder; `None` = `train`.
    pub split: Option<String>,
}

impl PathSource {
    /// Plain text at `path`, as a bare `{path: PATH}` item means.
    pub fn text(path: impl Into<PathBuf>) -> PathSource {
        PathSource {
            path: path.into(),
            format: SourceFormat::Text,
            compression: Compression::Auto,
            field: None,
            column: None,
            split: None,
        }
    }

    /// The field or column the text is read from (`text` unless set).
    pub fn text_key(&self) -> &str {
        match self.format {
            SourceFormat::Parquet => self.column.as_deref().unwrap_or(DEFAULT_TEXT_KEY),
            _ => self.field.as_deref().unwrap_or(DEFAULT_TEXT_KEY),
        }
    }
}

/// The field or column records keep their text in, unless a source names another.
pub const DEFAULT_TEXT_KEY: &str = "text";

/// How a source's files hold documents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceFormat {
    /// Plain UTF-8 text, split into documents at `data.document_separator`.
    #[default]
    Text,
    /// One JSON object a line; each line is a document (its `field`).
    Jsonl,
    /// Parquet files (a hub dataset's local copy); each row is a document (its `column`).
    Parquet,
    /// A Hugging Face `datasets` folder written by `save_to_disk` (Arrow IPC files);
    /// each row is a document (its `field`).
    Datasets,
}

impl SourceFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceFormat::Text => "text",
            SourceFormat::Jsonl => "jsonl",
            SourceFormat::Parquet => "parquet",
            SourceFormat::Datasets => "datasets",
        }
    }

    /// Whether each record of the format is one document (everything but `text`).
    pub fn is_records(self) -> bool {
        self != SourceFormat::Text
    }
}

impl fmt::Display for SourceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whole-file compression of a source file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// By the file's extension: `.gz` is gzip, `.zst`/`.zstd` is zstd, anything else none.
    #[default]
    Auto,
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Auto => "auto",
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const SHAPES: &str = "{embedded: tinyshakespeare}, {path: PATH, format: text|jsonl|parquet|datasets} or {url: URL, sha256: HEX}";

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Embedded,
    Path,
    Url,
    Sha256,
    Format,
    Compression,
    Field,
    Column,
    Split,
}

impl<'de> Deserialize<'de> for DataSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SourceVisitor;
        impl<'de> Visitor<'de> for SourceVisitor {
            type Value = DataSource;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a source: {SHAPES}")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DataSource, A::Error> {
                let (mut embedded, mut path, mut url, mut sha256) = (None, None, None, None);
                let mut local = PathSource::text(PathBuf::new());
                let mut path_keys: Vec<&str> = Vec::new();
                while let Some(field) = map.next_key::<Key>()? {
                    match field {
                        Key::Embedded => embedded = Some(map.next_value::<EmbeddedCorpus>()?),
                        Key::Path => path = Some(map.next_value::<PathBuf>()?),
                        Key::Url => url = Some(map.next_value::<String>()?),
                        Key::Sha256 => sha256 = Some(map.next_value::<String>()?),
                        Key::Format => {
                            local.format = map.next_value()?;
                            path_keys.push("format");
                        }
                        Key::Compression => {
                            local.compression = map.next_value()?;
                            path_keys.push("compression");
                        }
                        Key::Field => {
                            local.field = map.next_value()?;
                            path_keys.push("field");
                        }
                        Key::Column => {
                            local.column = map.next_value()?;
                            path_keys.push("column");
                        }
                        Key::Split => {
                            local.split = map.next_value()?;
                            path_keys.push("split");
                        }
                    }
                }
                if path.is_none()
                    && let Some(key) = path_keys.first()
                {
                    return Err(de::Error::custom(format!(
                        "`{key}` belongs to a local source; add `path: PATH` to this item or remove `{key}`"
                    )));
                }
                match (embedded, path, url, sha256) {
                    (Some(name), None, None, None) => Ok(DataSource::Embedded(name)),
                    (None, Some(path), None, None) => {
                        local.path = path;
                        Ok(DataSource::Path(local))
                    }
                    (None, None, Some(url), Some(sha256)) => Ok(DataSource::Url { url, sha256 }),
                    (None, None, Some(_), None) => Err(de::Error::custom(
                        "a url source needs `sha256: HEX` (the file's SHA-256) so downloads can be verified",
                    )),
                    (None, None, None, None) => Err(de::Error::custom(format!(
                        "empty source; write one of {SHAPES}"
                    ))),
                    _ => Err(de::Error::custom(format!(
                        "a source item has exactly one of `embedded`, `path` or `url` (with `sha256`); split it into separate items: {SHAPES}"
                    ))),
                }
            }
        }
        d.deserialize_map(SourceVisitor)
    }
}

impl Serialize for DataSource {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            DataSource::Embedded(name) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("embedded", name)?;
                map.end()
            }
            // Keys left at their defaults are left out, so a plain `{path}` item reads
            // (and hashes, in the data steps' manifests) as it always has.
            DataSource::Path(p) => {
                let mut map = s.serialize_map(None)?;
                map.serialize_entry("path", &p.path)?;
                if p.format != SourceFormat::Text {
                    map.serialize_entry("format", &p.format)?;
                }
                if p.compression != Compression::Auto {
                    map.serialize_entry("compression", &p.compression)?;
                }
                for (key, value) in [
                    ("field", &p.field),
                    ("column", &p.column),
                    ("split", &p.split),
                ] {
                    if let Some(v) = value {
                        map.serialize_entry(key, v)?;
                    }
                }
                map.end()
            }
            DataSource::Url { url, sha256 } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("url", url)?;
                map.serialize_entry("sha256", sha256)?;
                map.end()
            }
        }
    }
}
