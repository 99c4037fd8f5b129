//! A directory built under a hidden `.tmp-` name and renamed into place, so an
//! interrupted export never leaves a directory that looks complete.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::Result;
use crate::atomic::{TMP_PREFIX, sync_dir};
use crate::error::IoContext;

pub struct Staging {
    tmp: PathBuf,
    target: PathBuf,
    done: bool,
}

impl Staging {
    /// Starts building `target` in a hidden sibling.
    pub fn begin(target: &Path) -> Result<Staging> {
        let parent = target.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(parent).ctx("create the export directory", parent)?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = parent.join(format!("{TMP_PREFIX}{name}-{}", std::process::id()));
        if tmp.exists() {
            // Left by an earlier attempt of this very process id: never complete.
            fs::remove_dir_all(&tmp).ctx("remove the stale temporary directory", &tmp)?;
        }
        fs::create_dir(&tmp).ctx("create temporary export directory", &tmp)?;
        Ok(Staging {
            tmp,
            target: target.to_path_buf(),
            done: false,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.tmp
    }

    /// Makes every file durable, then swaps the directory into place (replacing an
    /// older export of the same name).
    pub fn commit(mut self) -> Result<PathBuf> {
        for entry in fs::read_dir(&self.tmp).ctx("list", &self.tmp)? {
            let path = entry.ctx("list", &self.tmp)?.path();
            if path.is_file() {
                File::open(&path)
                    .and_then(|f| f.sync_all())
                    .ctx("fsync", &path)?;
            }
        }
        sync_dir(&self.tmp)?;
        let parent = self.target.parent().unwrap_or(Path::new(".")).to_path_buf();
        let old = if self.target.exists() {
            let name = self
                .target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let old = parent.join(format!("{TMP_PREFIX}old-{name}-{}", std::process::id()));
            fs::rename(&self.target, &old).ctx("move the previous export aside", &self.target)?;
            Some(old)
        } else {
            None
        };
        fs::rename(&self.tmp, &self.target).ctx("rename the export into place", &self.target)?;
        self.done = true;
        sync_dir(&parent)?;
        if let Some(old) = old {
            fs::remove_dir_all(&old).ctx("remove the previous export", &old)?;
        }
        Ok(self.target.clone())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

/// Removes `.tmp-` directories in `dir` left by export processes that are gone.
/// Only on Linux, where `/proc` says whether a process is alive; elsewhere they stay
/// (hidden and ignored).
pub fn sweep_leftovers(dir: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = staging_pid(&name) else {
            continue;
        };
        if pid != std::process::id()
            && pid != std::process::id()
            && !Path::new("/proc").join(pid.to_string()).exists()
        {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// The pid in a name this module creates (`.tmp-[old-]checkpoint-<step>-<pid>`);
/// `None` for anything else, such as a worker's in-flight checkpoint.
fn staging_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(TMP_PREFIX)?;
    let rest = rest.strip_prefix("old-").unwrap_or(rest);
    let rest = rest.strip_prefix("checkpoint-")?;
    let (step, pid) = rest.split_once('-')?;
    if step.is_empty() || !step.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_its_own_names_are_swept() {
        assert_eq!(staging_pid(".tmp-checkpoint-40-123"), Some(123));
        assert_eq!(staging_pid(".tmp-old-checkpoint-40-123"), Some(123));
        assert_eq!(staging_pid(".tmp-pretrain-12-00-01-0003-123-0"), None);
        assert_eq!(staging_pid(".tmp-checkpoint-40-123-0"), None);
        assert_eq!(staging_pid("checkpoint-40"), None);
    }

    #[test]
    fn a_dropped_staging_leaves_nothing_and_commit_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("checkpoint-3");
        let s = Staging::begin(&target).unwrap();
        fs::write(s.dir().join("a"), b"1").unwrap();
        drop(s);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);

        let s = Staging::begin(&target).unwrap();
        fs::write(s.dir().join("a"), b"1").unwrap();
        s.commit().unwrap();
        let s = Staging::begin(&target).unwrap();
        fs::write(s.dir().join("b"), b"2").unwrap();
        s.commit().unwrap();
        assert!(!target.join("a").exists() && target.join("b").exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
