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
/// first ([`StagedDir::begin_exclusive`]).
pub fn begin(target: &Path) -> Result<StagedDir> {
    // A shard directory holds thousands of files: one syncfs, not an fsync each.
    Ok(StagedDir::begin_exclusive(target)?.sync_whole_filesystem())
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
        std::fs::create_dir(tmp.path().join(".tmp-out-999999-0")).unwrap();
        std::fs::create_dir(tmp.path().join(".tmp-old-out-999999-3")).unwrap();
        std::fs::create_dir(tmp.path().join(".tmp-outer-999999-0")).unwrap();
        let s = begin(&target).unwrap();
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
