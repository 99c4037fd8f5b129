//! Parsed histories, kept per file and keyed by what `stat` says (device, inode,
//! size, mtime): an unchanged file is never parsed twice, and a sidecar that only
//! grew is parsed from where the last parse stopped. A replaced file (the worker
//! rewrites the sidecar atomically when it resumes) is parsed afresh.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use lavender::log_history::{FILE as ARRAY, SIDECAR};

use super::Series;

/// Runs whose parsed history is kept.
const KEEP: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error(
        "no {SIDECAR} or {ARRAY} in {0} yet: the worker writes one entry per step once training starts"
    )]
    Missing(PathBuf),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a JSON array of history entries: {reason}")]
    Malformed { path: PathBuf, reason: String },
}

/// How a load was answered (tests and logs tell the cache works by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse {
    Cached,
    Appended,
    Full,
}

pub struct Loaded {
    pub source: &'static str,
    pub series: Arc<Series>,
    pub parse: Parse,
}

#[derive(Clone, PartialEq)]
struct FileKey {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
}

struct Entry {
    path: PathBuf,
    key: FileKey,
    /// Bytes of the sidecar parsed so far (through the last complete line).
    parsed_to: u64,
    series: Arc<Series>,
}

#[derive(Default)]
pub struct HistoryCache {
    entries: Mutex<Vec<Entry>>,
}

impl HistoryCache {
    /// The run's history: the sidecar when there is one, else the array. Blocking.
    pub fn load(&self, run_dir: &Path) -> Result<Loaded, HistoryError> {
        let sidecar = run_dir.join(SIDECAR);
        let array = run_dir.join(ARRAY);
        let (path, source, meta) = match std::fs::metadata(&sidecar) {
            Ok(m) => (sidecar, SIDECAR, m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::metadata(&array) {
                Ok(m) => (array, ARRAY, m),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(HistoryError::Missing(run_dir.to_path_buf()));
                }
                Err(source) => {
                    return Err(HistoryError::Io {
                        path: array,
                        source,
                    });
                }
            },
            Err(source) => {
                return Err(HistoryError::Io {
                    path: sidecar,
                    source,
                });
            }
        };
        let key = FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.modified().ok(),
        };
        // Held while parsing: concurrent requests for a run want the same parse.
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let found = entries.iter().position(|e| e.path == path);
        if let Some(i) = found {
            let entry = &mut entries[i];
            if entry.key == key {
                return Ok(Loaded {
                    source,
                    series: entry.series.clone(),
                    parse: Parse::Cached,
                });
            }
            let same_file = entry.key.dev == key.dev && entry.key.ino == key.ino;
            if source == SIDECAR && same_file && key.len >= entry.parsed_to {
                let chunk = read_from(&path, entry.parsed_to)?;
                let series = Arc::make_mut(&mut entry.series);
                entry.parsed_to += series.extend_lines(&chunk) as u64;
                entry.key = key;
                return Ok(Loaded {
                    source,
                    series: entry.series.clone(),
                    parse: Parse::Appended,
                });
            }
            entries.remove(i);
        }
        let bytes = read_from(&path, 0)?;
        let (series, parsed_to) = if source == SIDECAR {
            let mut s = Series::default();
            let used = s.extend_lines(&bytes);
            (s, used as u64)
        } else {
            let s = Series::from_array(&bytes).map_err(|e| HistoryError::Malformed {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            (s, bytes.len() as u64)
        };
        let series = Arc::new(series);
        if entries.len() >= KEEP {
            entries.remove(0);
        }
        entries.push(Entry {
            path,
            key,
            parsed_to,
            series: series.clone(),
        });
        Ok(Loaded {
            source,
            series,
            parse: Parse::Full,
        })
    }
}

fn read_from(path: &Path, offset: u64) -> Result<Vec<u8>, HistoryError> {
    let io = |source| HistoryError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).map_err(io)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn parses_once_extends_on_growth_and_restarts_on_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let cache = HistoryCache::default();
        assert!(matches!(
            cache.load(dir.path()),
            Err(HistoryError::Missing(_))
        ));

        // Only the array: it is used.
        std::fs::write(dir.path().join(ARRAY), r#"[{"step":1,"loss":3.0}]"#).unwrap();
        let l = cache.load(dir.path()).unwrap();
        assert_eq!(
            (l.source, l.parse, l.series.loss.len()),
            (ARRAY, Parse::Full, 1)
        );

        // The sidecar wins once it exists.
        let side = dir.path().join(SIDECAR);
        append(
            &side,
            "{\"step\":1,\"loss\":3.0}\n{\"step\":2,\"loss\":2.0}\n",
        );
        let l = cache.load(dir.path()).unwrap();
        assert_eq!(
            (l.source, l.parse, l.series.loss.len()),
            (SIDECAR, Parse::Full, 2)
        );
        assert_eq!(cache.load(dir.path()).unwrap().parse, Parse::Cached);

        // Growth (with a torn last line) is parsed incrementally.
        append(&side, "{\"step\":3,\"loss\":1.5}\n{\"step\":4,");
        let l = cache.load(dir.path()).unwrap();
        assert_eq!((l.parse, l.series.loss.len()), (Parse::Appended, 3));
        append(&side, "\"loss\":1.0}\n");
        let l = cache.load(dir.path()).unwrap();
        assert_eq!((l.parse, l.series.loss.len()), (Parse::Appended, 4));
        assert_eq!(l.series.loss.last(), Some(&[4.0, 1.0]));

        // Replaced by rename (a resume cuts the history back): parsed afresh.
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, "{\"step\":1,\"loss\":3.0}\n").unwrap();
        std::fs::rename(&tmp, &side).unwrap();
        let l = cache.load(dir.path()).unwrap();
        assert_eq!((l.parse, l.series.loss.len()), (Parse::Full, 1));
    }

    #[test]
    fn a_broken_array_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(ARRAY), "{oops").unwrap();
        let err = HistoryCache::default()
            .load(dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("log_history.json is not a JSON array"),
            "{err}"
        );
    }
}
