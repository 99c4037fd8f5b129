//! Crash-safe writes. A reader sees either the old file or the new one, never a
//! half-written one: write a temporary sibling, fsync it, rename it over the target,
//! fsync the directory so the rename itself survives a power cut.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::checkpoint::CheckpointName;
use crate::error::{Error, IoContext, Result};
use crate::trainer_state::{self, TrainerState};

/// Prefix of every temporary file or directory lavender creates; listing skips them.
pub const TMP_PREFIX: &str = ".tmp-";

fn tmp_sibling(path: &Path) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| Error::BadName {
        kind: "file",
        name: path.display().to_string(),
        expected: "a path ending in a file name",
    })?;
    let tmp = format!(
        "{TMP_PREFIX}{}-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        unique_suffix()
    );
    Ok(path.with_file_name(tmp))
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// fsync a directory so renames and creations inside it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    // Opening a directory read-only and fsyncing it is how POSIX persists its entries.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx("fsync directory", dir)
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Write `bytes` to `path` atomically.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_sibling(path)?;
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .ctx("create", &tmp)?;
        f.write_all(bytes).ctx("write", &tmp)?;
        f.sync_all().ctx("fsync", &tmp)?;
        fs::rename(&tmp, path).ctx("rename into place", path)?;
        sync_dir(parent_of(path))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Serialize `value` as pretty JSON and write it atomically.
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::Malformed {
        path: path.to_path_buf(),
        reason: format!("could not serialize: {e}"),
    })?;
    bytes.push(b'\n');
    write_file(path, &bytes)
}

/// A checkpoint directory under construction. Files go into a hidden temporary
/// directory; `commit` writes `trainer_state.json` last and renames the directory
/// into place, so a checkpoint is either complete or invisible.
#[derive(Debug)]
pub struct CheckpointBuilder {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl CheckpointBuilder {
    pub fn begin(run_dir: &Path, name: &CheckpointName) -> Result<Self> {
        let target = run_dir.join(name.to_string());
        if target.exists() {
            return Err(Error::Malformed {
                path: target,
                reason: "a checkpoint with this name already exists; counters must not be reused"
                    .into(),
            });
        }
        let tmp = run_dir.join(format!(
            "{TMP_PREFIX}{name}-{}-{}",
            std::process::id(),
            unique_suffix()
        ));
        fs::create_dir_all(&tmp).ctx("create temporary checkpoint directory", &tmp)?;
        Ok(CheckpointBuilder {
            tmp,
            target,
            committed: false,
        })
    }

    /// The directory to write the checkpoint's files into.
    pub fn dir(&self) -> &Path {
        &self.tmp
    }

    /// The path the checkpoint will have once committed.
    pub fn target(&self) -> &Path {
        &self.target
    }

    pub fn commit(mut self, state: &TrainerState) -> Result<PathBuf> {
        // Every payload file must be durable before the marker that declares them complete.
        for entry in fs::read_dir(&self.tmp).ctx("read", &self.tmp)? {
            let path = entry.ctx("read", &self.tmp)?.path();
            if path.is_file() {
                File::open(&path)
                    .and_then(|f| f.sync_all())
                    .ctx("fsync", &path)?;
            }
        }
        trainer_state::write(&self.tmp, state)?;
        sync_dir(&self.tmp)?;
        fs::rename(&self.tmp, &self.target).ctx("rename checkpoint into place", &self.target)?;
        sync_dir(parent_of(&self.target))?;
        self.committed = true;
        Ok(self.target.clone())
    }
}

impl Drop for CheckpointBuilder {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_file_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_file(&p, b"one").unwrap();
        write_file(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }

    #[test]
    fn write_file_into_missing_dir_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing").join("a.json");
        let err = write_file(&p, b"x").unwrap_err().to_string();
        assert!(err.contains("missing"), "{err}");
    }
}
