//! The hard examples a run's pretraining mixes in, and the run's copy of them.
//!
//! `mine_hard` keeps each mining in a directory of its own under
//! `<data_root>/hard_examples/` (`lavender::hard_examples` names and lists them). A run
//! of chunk C mixes in the newest mining of every earlier chunk whose windows have its
//! length. The choice is made once, when pretraining starts, and the chosen windows
//! are copied one after the other into the run directory (`hard-examples.bin`), so a
//! resume mixes exactly the same ones even if `mine_hard` has run again since.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lavender::hard_examples::{self as kept, Mining};

use crate::tokens::{Dtype, TokenArray};

/// The run's copy of the windows it mixes in.
pub const RUN_FILE: &str = "hard-examples.bin";

pub fn run_file(run_dir: &Path) -> PathBuf {
    run_dir.join(RUN_FILE)
}

/// What a run of one chunk mixes in, and why it leaves out what it leaves out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Choice {
    /// The minings to mix in, earliest chunk first: their windows file and chunk.
    pub used: Vec<(PathBuf, u64)>,
    /// One line per earlier chunk's mining that is not mixed in, with the reason.
    pub skipped: Vec<String>,
}

/// For a run of `chunk` with windows of `seq_len + 1` tokens: the newest mining of
/// every earlier chunk, if its windows have that length.
pub fn choose(data_root: &Path, chunk: u8, seq_len: usize) -> Result<Choice> {
    let minings = match kept::list(data_root) {
        Ok(m) => m,
        Err(e) => {
            return Ok(Choice {
                used: Vec::new(),
                skipped: vec![format!(
                    "the hard examples could not be listed ({e}); fix the directory or rerun mine_hard"
                )],
            });
        }
    };
    let mut choice = Choice::default();
    for m in kept::newest_before(&minings, u64::from(chunk)) {
        let Mining { mined, .. } = m;
        if mined.seq_len != seq_len as u64 {
            choice.skipped.push(format!(
                "{} holds windows of seq_len {}, this run uses {seq_len}; rerun chunk {}'s mine_hard with training.seq_len={seq_len}",
                m.dir.display(),
                mined.seq_len,
                mined.chunk
            ));
            continue;
        }
        choice.used.push((m.windows(), mined.chunk));
    }
    Ok(choice)
}

/// Writes the run's [`RUN_FILE`]: the windows of `from`, one file after the other
/// (temp, sync, rename), or removes a stale copy when `from` is empty.
pub fn take(run_dir: &Path, from: &[PathBuf]) -> Result<()> {
    let dest = run_file(run_dir);
    if from.is_empty() {
        return match std::fs::remove_file(&dest) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("could not remove {}", dest.display()))
            }
            _ => Ok(()),
        };
    }
    let tmp = run_dir.join(format!(".{RUN_FILE}.tmp"));
    let mut out = std::fs::File::create(&tmp)
        .with_context(|| format!("could not create {}", tmp.display()))?;
    for path in from {
        let mut src = std::fs::File::open(path)
            .with_context(|| format!("could not open the hard examples {}", path.display()))?;
        std::io::copy(&mut src, &mut out).with_context(|| {
            format!(
                "could not copy the hard examples {} to {}",
                path.display(),
                tmp.display()
            )
        })?;
    }
    out.flush()
        .and_then(|_| out.sync_all())
        .with_context(|| format!("could not sync {}", tmp.display()))?;
    drop(out);
    std::fs::rename(&tmp, &dest)
        .with_context(|| format!("could not move {} into place", dest.display()))?;
    lavender::atomic::sync_dir(run_dir)?;
    Ok(())
}

/// The run's copy, when it has one.
pub fn open(run_dir: &Path, dtype: Dtype) -> Result<Option<TokenArray>> {
    let path = run_file(run_dir);
    if !path.exists() {
        return Ok(None);
    }
    TokenArray::open(&path, dtype, u64::MAX).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::hard_examples::{Mined, STEP, WINDOWS_FILE};
    use lavender::manifest::{self, StepManifest};

    fn mining(root: &Path, name: &str, chunk: u64, seq_len: u64, bytes: &[u8]) -> PathBuf {
        let d = kept::dir(root).join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(WINDOWS_FILE), bytes).unwrap();
        let m = StepManifest {
            step: STEP.into(),
            version: 1,
            config_hash: "x".into(),
            inputs: vec![],
            counts: Default::default(),
            outputs: vec![WINDOWS_FILE.into()],
            finished_at: "2026-01-01T00:00:00Z".into(),
            extra: Mined {
                chunk,
                seq_len,
                upsample: 1,
            }
            .to_extra(),
        };
        manifest::write_path(&d.join(manifest::FILE), &m).unwrap();
        d.join(WINDOWS_FILE)
    }

    #[test]
    fn every_earlier_chunk_of_the_same_window_length_is_mixed_in_and_copied_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        assert_eq!(choose(root, 2, 64).unwrap(), Choice::default());
        let one = mining(root, "chunk1-1", 1, 64, b"aa");
        let two = mining(root, "chunk2-1", 2, 64, b"bb");
        mining(root, "chunk3-1", 3, 32, b"cc");
        // A chunk never feeds on its own hard examples, nor on a later chunk's.
        assert_eq!(choose(root, 1, 64).unwrap(), Choice::default());
        let c = choose(root, 4, 64).unwrap();
        assert_eq!(c.used, vec![(one.clone(), 1), (two.clone(), 2)]);
        assert_eq!(c.skipped.len(), 1);
        assert!(c.skipped[0].contains("seq_len=64"), "{}", c.skipped[0]);

        let run = tmp.path().join("run");
        std::fs::create_dir_all(&run).unwrap();
        let paths: Vec<PathBuf> = c.used.iter().map(|(p, _)| p.clone()).collect();
        take(&run, &paths).unwrap();
        assert_eq!(std::fs::read(run_file(&run)).unwrap(), b"aabb");
        take(&run, &[]).unwrap();
        assert!(!run_file(&run).exists());
    }
}
