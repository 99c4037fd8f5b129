//! Crash-safe writes. A reader sees either the old file or the new one, never a
//! half-written one: write a temporary sibling, fsync it, rename it over the target,
//! fsync the directory so the rename itself survives a power cut.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, IoContext, Result};

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
        // Closed before the rename: closing after it would tell a directory watcher
        // (the status refresher) of a second change to the file now in place.
        drop(f);
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

/// A directory built under a hidden temporary name beside its target
/// (`.tmp-<name>-<pid>-<n>`) and renamed into place once complete: a reader sees the
/// previous directory (or none) or the new one, never half of one. Dropped without
/// `commit`, it removes what it built. Checkpoints (through `checkpoint::CheckpointBuilder`),
/// exports and the worker's step outputs (through [`StagedDir::begin_exclusive`])
/// are all built this way.
#[derive(Debug)]
pub struct StagedDir {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
    whole_filesystem: bool,
    /// Held until committed or dropped, for one built by a single process at a time.
    _lock: Option<File>,
}

impl StagedDir {
    /// Starts building `target`, creating its parent when missing.
    pub fn begin(target: &Path) -> Result<StagedDir> {
        let parent = parent_of(target);
        fs::create_dir_all(parent).ctx("create directory", parent)?;
        let tmp = tmp_sibling(target)?;
        fs::create_dir(&tmp).ctx("create temporary directory", &tmp)?;
        Ok(StagedDir {
            tmp,
            target: target.to_path_buf(),
            committed: false,
            whole_filesystem: false,
            _lock: None,
        })
    }

    /// [`begin`](Self::begin) for an output one process at a time may build: holds
    /// an advisory lock on `.<name>.lock` beside `target` until committed or dropped
    /// (another process is refused, told which lock is held), and first removes the
    /// temporary and set-aside directories earlier builds of `target` left when
    /// killed, which the lock proves no one is using.
    pub fn begin_exclusive(target: &Path) -> Result<StagedDir> {
        let parent = parent_of(target);
        fs::create_dir_all(parent).ctx("create directory", parent)?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let lock_path = parent.join(format!(".{name}.lock"));
        let lock = File::create(&lock_path).ctx("create lock file", &lock_path)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(Error::Busy {
                    path: target.to_path_buf(),
                    lock: lock_path,
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(Error::io("lock", &lock_path, e)),
        }
        for entry in fs::read_dir(parent).ctx("list", parent)? {
            let entry = entry.ctx("list", parent)?;
            let entry_name = entry.file_name().to_string_lossy().into_owned();
            if staged_leftover(&entry_name).is_some_and(|(of, _)| of == name) {
                let path = entry.path();
                fs::remove_dir_all(&path).ctx("remove the leftover", &path)?;
            }
        }
        let mut staged = StagedDir::begin(target)?;
        staged._lock = Some(lock);
        Ok(staged)
    }

    /// Make the contents durable with one `syncfs` of the whole filesystem (Linux)
    /// rather than an fsync per file: far cheaper for thousands of files.
    pub fn sync_whole_filesystem(mut self) -> StagedDir {
        self.whole_filesystem = true;
        self
    }

    /// The directory to write into.
    pub fn dir(&self) -> &Path {
        &self.tmp
    }

    /// The path it will have once committed.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Makes everything in it durable and renames it into place.
    pub fn commit(self) -> Result<PathBuf> {
        self.commit_with(|_| Ok(()))
    }

    /// [`commit`](Self::commit), with `last` writing into the directory after
    /// everything else in it is durable and before the rename: what declares it
    /// complete. An existing target is replaced: moved aside under a temporary name,
    /// then removed once the new one is in place.
    pub fn commit_with(mut self, last: impl FnOnce(&Path) -> Result<()>) -> Result<PathBuf> {
        sync_tree(&self.tmp, self.whole_filesystem)?;
        last(&self.tmp)?;
        sync_dir(&self.tmp)?;
        let aside = match self.target.symlink_metadata() {
            Ok(_) => {
                let name = self
                    .target
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy();
                let aside = tmp_sibling(&self.target.with_file_name(format!("old-{name}")))?;
                fs::rename(&self.target, &aside)
                    .ctx("move the previous one aside", &self.target)?;
                Some(aside)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("stat", &self.target, e)),
        };
        fs::rename(&self.tmp, &self.target).ctx("rename into place", &self.target)?;
        self.committed = true;
        sync_dir(parent_of(&self.target))?;
        if let Some(aside) = aside {
            fs::remove_dir_all(&aside).ctx("remove the previous one", &aside)?;
        }
        Ok(self.target.clone())
    }
}

impl Drop for StagedDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

/// The name and pid in the name of a temporary directory a [`StagedDir`] made
/// (`.tmp-<name>-<pid>-<n>`, or `.tmp-old-<name>-<pid>-<n>` for one moved aside),
/// for sweeping what a killed process left; `None` for any other name.
pub fn staged_leftover(entry: &str) -> Option<(&str, u32)> {
    let rest = entry.strip_prefix(TMP_PREFIX)?;
    let rest = rest.strip_prefix("old-").unwrap_or(rest);
    let mut parts = rest.rsplitn(3, '-');
    let n = parts.next()?;
    let pid = parts.next()?;
    let name = parts.next()?;
    if name.is_empty() || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((name, pid.parse().ok()?))
}

/// fsync every file and directory below `dir`, or one `syncfs` when asked (Linux).
fn sync_tree(dir: &Path, whole_filesystem: bool) -> Result<()> {
    #[cfg(target_os = "linux")]
    if whole_filesystem {
        use std::os::fd::AsRawFd;
        let d = File::open(dir).ctx("open", dir)?;
        // SAFETY: syncfs only reads the descriptor, which `d` keeps open.
        if unsafe { syncfs(d.as_raw_fd()) } == 0 {
            return Ok(());
        }
    }
    let _ = whole_filesystem;
    for entry in fs::read_dir(dir).ctx("list", dir)? {
        let entry = entry.ctx("list", dir)?;
        let path = entry.path();
        if entry.file_type().ctx("stat", &path)?.is_dir() {
            sync_tree(&path, false)?;
        } else {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .ctx("fsync", &path)?;
        }
    }
    sync_dir(dir)
}

#[cfg(target_os = "linux")]
unsafe extern "C" {
    fn syncfs(fd: std::os::raw::c_int) -> std::os::raw::c_int;
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
    fn a_staged_dir_is_invisible_until_committed_and_replaces_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let s = StagedDir::begin(&target).unwrap();
        fs::create_dir(s.dir().join("sub")).unwrap();
        fs::write(s.dir().join("sub/a"), b"1").unwrap();
        assert!(!target.exists());
        drop(s);
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            0,
            "dropped: nothing left"
        );

        let s = StagedDir::begin(&target).unwrap();
        fs::write(s.dir().join("a"), b"1").unwrap();
        assert_eq!(s.commit().unwrap(), target);
        let s = StagedDir::begin(&target).unwrap().sync_whole_filesystem();
        fs::write(s.dir().join("b"), b"2").unwrap();
        s.commit_with(|d| write_file(&d.join("marker"), b""))
            .unwrap();
        assert!(!target.join("a").exists() && target.join("b").exists());
        assert!(target.join("marker").exists());
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary or set-aside directory left");
    }

    #[test]
    fn an_exclusive_build_refuses_a_second_and_clears_the_leftovers_of_killed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        for leftover in [
            ".tmp-out-999999-0",
            ".tmp-old-out-999999-3",
            ".tmp-outer-9-0",
        ] {
            fs::create_dir(dir.path().join(leftover)).unwrap();
        }
        let first = StagedDir::begin_exclusive(&target).unwrap();
        assert!(!dir.path().join(".tmp-out-999999-0").exists());
        assert!(!dir.path().join(".tmp-old-out-999999-3").exists());
        assert!(
            dir.path().join(".tmp-outer-9-0").exists(),
            "another output's staging is not this one's leftover"
        );
        let err = StagedDir::begin_exclusive(&target).unwrap_err().to_string();
        assert!(
            err.contains("another run is writing") && err.contains(".out.lock"),
            "{err}"
        );
        assert!(first.dir().exists(), "the first build's directory survives");
        first.commit().unwrap();
        StagedDir::begin_exclusive(&target)
            .unwrap()
            .commit()
            .unwrap();
    }

    #[test]
    fn staged_leftovers_are_recognised_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let s = StagedDir::begin(&dir.path().join("checkpoint-40")).unwrap();
        let name = s.dir().file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(
            staged_leftover(&name),
            Some(("checkpoint-40", std::process::id()))
        );
        assert_eq!(
            staged_leftover(".tmp-old-pretrain-12-00-01-0003-77-0"),
            Some(("pretrain-12-00-01-0003", 77))
        );
        assert_eq!(staged_leftover(".tmp-a-b-0"), None);
        assert_eq!(staged_leftover("checkpoint-40"), None);
        assert_eq!(staged_leftover(".tmp--1-2"), None);
    }

    #[test]
    fn write_file_into_missing_dir_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing").join("a.json");
        let err = write_file(&p, b"x").unwrap_err().to_string();
        assert!(err.contains("missing"), "{err}");
    }
}
