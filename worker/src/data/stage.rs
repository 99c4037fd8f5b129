//! Atomic outputs. A step builds its output directory under a hidden staging name next
//! to it and swaps it into place only when complete; its manifest is written after the
//! swap. A step killed or failing at any point leaves the previous outputs and manifest
//! (or no manifest at all), never a half-written directory that looks complete.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result, bail};
use lavender::atomic::{StagedDir, TMP_PREFIX, staged_leftover};

/// An output directory under construction: a [`StagedDir`] (built under a hidden
/// name, renamed into place) held under a per-output lock.
pub struct Staged {
    dir: StagedDir,
    /// Held while the step runs: a second run of the same step on the same data root
    /// would otherwise delete this run's staging directory as a leftover.
    _lock: File,
}

impl Staged {
    /// Start building `target` (e.g. `<root>/corpus/dedup`). Leftovers of earlier,
    /// interrupted runs of the same step are removed first.
    pub fn begin(target: &Path) -> Result<Staged> {
        let parent = target
            .parent()
            .context("an output directory has a parent")?;
        std::fs::create_dir_all(parent)
            .with_context(|| format!("could not create {}", parent.display()))?;
        let name = file_name(target);
        let lock_path = parent.join(format!(".{name}.lock"));
        let lock = File::create(&lock_path)
            .with_context(|| format!("could not create lock file {}", lock_path.display()))?;
        if !try_lock(&lock) {
            bail!(
                "another run is writing {} (lock {} is held); wait for it to finish",
                target.display(),
                lock_path.display()
            );
        }
        remove_leftovers(parent, &name)?;
        // A shard directory holds thousands of files: one syncfs, not an fsync each.
        let dir = StagedDir::begin(target)
            .with_context(|| format!("could not stage {}", target.display()))?
            .sync_whole_filesystem();
        Ok(Staged { dir, _lock: lock })
    }

    pub fn path(&self) -> &Path {
        self.dir.dir()
    }

    /// Give each staged output whose bytes equal the current one's the current one's
    /// mtime, so the next steps' fingerprints (size + mtime) still match and a rerun that
    /// changed nothing (a `--force`, a touched source file) does not cascade down the
    /// pipeline. `outputs` are relative to `step_dir`, which holds the target. Returns
    /// how many outputs were unchanged.
    pub fn keep_unchanged_mtimes(&self, step_dir: &Path, outputs: &[String]) -> Result<usize> {
        let target = self.dir.target();
        let inner = target.strip_prefix(step_dir).unwrap_or(Path::new(""));
        let mut unchanged = 0;
        for o in outputs {
            let Ok(rel) = Path::new(o).strip_prefix(inner) else {
                continue;
            };
            let (new, old) = (self.path().join(rel), target.join(rel));
            let Ok(old_meta) = std::fs::metadata(&old) else {
                continue;
            };
            if !same_bytes(&new, &old)? {
                continue;
            }
            let mtime = old_meta
                .modified()
                .with_context(|| format!("could not read the mtime of {}", old.display()))?;
            File::options()
                .write(true)
                .open(&new)
                .and_then(|f| f.set_modified(mtime))
                .with_context(|| format!("could not set the mtime of {}", new.display()))?;
            unchanged += 1;
        }
        Ok(unchanged)
    }

    /// Swap the staged directory into place. The caller removed the step's manifest
    /// before and writes the new one after, so a crash in between reads as "not done".
    pub fn commit(self) -> Result<()> {
        let target = self.dir.target().to_path_buf();
        self.dir
            .commit()
            .with_context(|| format!("could not put {} in place", target.display()))?;
        Ok(())
    }
}

/// True when both files hold the same bytes (compared streaming, sizes first).
fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    use std::io::Read;
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).ok();
    if len(a).is_none() || len(a) != len(b) {
        return Ok(false);
    }
    let open = |p: &Path| File::open(p).with_context(|| format!("could not open {}", p.display()));
    let (mut fa, mut fb) = (open(a)?, open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa
            .read(&mut ba)
            .with_context(|| format!("could not read {}", a.display()))?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n])
            .with_context(|| format!("could not read {}", b.display()))?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// An exclusive advisory lock, released when the file is closed (or the process dies).
fn try_lock(f: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock only reads the descriptor, which `f` keeps open.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Staging and set-aside directories of this output left by killed runs (the lock
/// is held, so none is in use): `.tmp-[old-]<name>-<pid>-<n>`, and
/// `.<name>.tmp-<pid>` / `.<name>.old-<pid>` as earlier versions named them.
fn remove_leftovers(parent: &Path, name: &str) -> Result<()> {
    let (tmp, old) = (format!(".{name}.tmp-"), format!(".{name}.old-"));
    let entries = std::fs::read_dir(parent)
        .with_context(|| format!("could not list {}", parent.display()))?;
    for entry in entries.flatten() {
        let n = entry.file_name().to_string_lossy().into_owned();
        let ours = n.starts_with(TMP_PREFIX) && staged_leftover(&n).is_some_and(|(t, _)| t == name);
        if ours || n.starts_with(&tmp) || n.starts_with(&old) {
            let p = entry.path();
            std::fs::remove_dir_all(&p)
                .with_context(|| format!("could not remove leftover {}", p.display()))?;
        }
    }
    Ok(())
}

/// Remove a file if it is there.
pub fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("could not remove {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_staging_leaves_previous_output_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("out");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("a"), "old").unwrap();
        {
            let s = Staged::begin(&target).unwrap();
            std::fs::write(s.path().join("a"), "half").unwrap();
        }
        assert_eq!(std::fs::read_to_string(target.join("a")).unwrap(), "old");
        assert_eq!(crate::data::step::tests_listing(tmp.path()), ["out"]);

        let s = Staged::begin(&target).unwrap();
        std::fs::write(s.path().join("a"), "new").unwrap();
        s.commit().unwrap();
        assert_eq!(std::fs::read_to_string(target.join("a")).unwrap(), "new");
        assert_eq!(crate::data::step::tests_listing(tmp.path()), ["out"]);
    }

    #[test]
    fn a_second_run_of_the_same_step_is_refused_while_the_first_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("out");
        let first = Staged::begin(&target).unwrap();
        let err = Staged::begin(&target).err().unwrap().to_string();
        assert!(
            err.contains("another run is writing") && err.contains("out"),
            "{err}"
        );
        assert!(first.path().exists(), "the first run's staging survives");
        drop(first);
        Staged::begin(&target).unwrap();
    }

    #[test]
    fn leftovers_of_a_killed_run_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("out");
        std::fs::create_dir(tmp.path().join(".out.tmp-999999")).unwrap();
        std::fs::create_dir(tmp.path().join(".tmp-out-999999-0")).unwrap();
        std::fs::create_dir(tmp.path().join(".tmp-old-out-999999-3")).unwrap();
        std::fs::create_dir(tmp.path().join(".tmp-outer-999999-0")).unwrap();
        let s = Staged::begin(&target).unwrap();
        assert!(!tmp.path().join(".out.tmp-999999").exists());
        assert!(!tmp.path().join(".tmp-out-999999-0").exists());
        assert!(!tmp.path().join(".tmp-old-out-999999-3").exists());
        assert!(
            tmp.path().join(".tmp-outer-999999-0").exists(),
            "another output's staging is not this one's leftover"
        );
        s.commit().unwrap();
        assert_eq!(crate::data::step::tests_listing(tmp.path()), ["out"]);
    }
}
