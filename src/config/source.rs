//! `data.sources` items: `{embedded: NAME}`, `{path: PATH}` or `{url: URL, sha256: HEX}`.

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
    /// A local text file or directory of text files.
    Path(PathBuf),
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

const SHAPES: &str = "{embedded: tinyshakespeare}, {path: PATH} or {url: URL, sha256: HEX}";

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Field {
    Embedded,
    Path,
    Url,
    Sha256,
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
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::Embedded => embedded = Some(map.next_value::<EmbeddedCorpus>()?),
                        Field::Path => path = Some(map.next_value::<PathBuf>()?),
                        Field::Url => url = Some(map.next_value::<String>()?),
                        Field::Sha256 => sha256 = Some(map.next_value::<String>()?),
                    }
                }
                match (embedded, path, url, sha256) {
                    (Some(name), None, None, None) => Ok(DataSource::Embedded(name)),
                    (None, Some(path), None, None) => Ok(DataSource::Path(path)),
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
            DataSource::Path(path) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("path", path)?;
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
