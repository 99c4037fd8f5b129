//! Atomic outputs. A step builds its output directory as a
//! [`StagedDir`](lavender::atomic::StagedDir), exclusively (under a per-output lock),
//! and swaps it into place only when complete; its manifest is written after the
//! swap. A step killed or failing at any point leaves the previous outputs and
//! manifest (or no manifest at all), never a half-written directory that looks
//! complete.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};
use lavender::atomic::StagedDir;

/// Start building `target` (e.g. `<root>/corpus/dedup`), refused while another run
/// builds it. Leftovers of earlier, interrupted runs of the same step are removed
/// first.
pub fn begin(target: &Path) -> Result<StagedDir> {
    // A shard directory holds thousands of files: one syncfs, not an fsync each.
    let staged = StagedDir::begin_exclusive(target)?.sync_whole_filesystem();
    if let Some(parent) = target.parent() {
        remove_legacy_leftovers(parent, &file_name(target))?;
    }
    Ok(staged)
}

/// Give each staged output whose bytes equal the current one's the current one's
/// mtime, so the next steps' fingerprints (size + mtime) still match and a rerun that
/// changed nothing (a `--force`, a touched source file) does not cascade down the
/// pipeline. `outputs` are relative to `step_dir`, which holds the target. Returns
/// how many outputs were unchanged.
pub fn keep_unchanged_mtimes(
    staged: &StagedDir,
    step_dir: &Path,
    outputs: &[String],
) -> Result<usize> {
    let target = staged.target();
    let inner = target.strip_prefix(step_dir).unwrap_or(Path::new(""));
    let mut unchanged = 0;
    for o in outputs {
        let Ok(rel) = Path::new(o).strip_prefix(inner) else {
            continue;
        };
        let (new, old) = (staged.dir().join(rel), target.join(rel));
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

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Staging and set-aside directories of this output as earlier versions named them
/// (`.<name>.tmp-<pid>` / `.<name>.old-<pid>`), left by killed runs; the lock is held,
/// so none is in use. Today's names are cleared by [`StagedDir::begin_exclusive`].
fn remove_legacy_leftovers(parent: &Path, name: &str) -> Result<()> {
    let (tmp, old) = (format!(".{name}.tmp-"), format!(".{name}.old-"));
    let entries = std::fs::read_dir(parent)
        .with_context(|| format!("could not list {}", parent.display()))?;
    for entry in entries.flatten() {
        let n = entry.file_name().to_string_lossy().into_owned();
        if n.starts_with(&tmp) || n.starts_with(&old) {
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
            let s = begin(&target).unwrap();
            std::fs::write(s.dir().join("a"), "half").unwrap();
        }
        assert_eq!(std::fs::read_to_string(target.join("a")).unwrap(), "old");
        assert_eq!(crate::data::step::tests_listing(tmp.path()), ["out"]);

        let s = begin(&target).unwrap();
        std::fs::write(s.dir().join("a"), "new").unwrap();
        s.commit().unwrap();
        assert_eq!(std::fs::read_to_string(target.join("a")).unwrap(), "new");
        assert_eq!(crate::data::step::tests_listing(tmp.path()), ["out"]);
    }

    #[test]
    fn leftovers_of_a_killed_run_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("out");
        std::fs::create_dir(tmp.path().join(".out.tmp-999999")).unwrap();
        std::fs::create_dir(tmp.path().join(".tmp-out-999999-0")).unwrap();
        std::fs::create_dir(tmp.path().join(".tmp-old-out-999999-3")).unwrap();
        std::fs::create_dir(tmp.path().join(".tmp-outer-999999-0")).unwrap();
        let s = begin(&target).unwrap();
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
