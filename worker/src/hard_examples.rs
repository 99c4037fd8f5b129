//! The hard-examples files: what `mine_hard` writes and what a later chunk's
//! pretraining reads, named and checked in one place.
//!
//! `mine_hard` (after a chunk's training) writes `<data_root>/hard_examples/`:
//! `windows.bin` (the chunk's highest-loss windows of `seq_len + 1` tokens, hardest
//! first, each already repeated `upsample` times, in the token arrays' dtype),
//! `windows.json` (rank, shard, start, loss of each), then `manifest.json`, whose
//! extra fields ([`Mined`]) say which chunk and window length they are from. A later
//! chunk's pretraining adds those windows to its own. The choice is made once, when
//! pretraining starts, and the windows are copied into the run directory
//! (`hard-examples.bin`), so a resume mixes exactly the same ones even if `mine_hard`
//! has run again since.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lavender::manifest::{self, StepManifest};
use serde_json::{Value, json};

use crate::tokens::{Dtype, TokenArray};

/// The step's name, in its manifest and the pipeline.
pub const STEP: &str = "mine_hard";
/// The run's copy of the windows it mixes in.
pub const RUN_FILE: &str = "hard-examples.bin";
/// The windows file `mine_hard` writes in its directory.
pub const WINDOWS_FILE: &str = "windows.bin";
/// The list of the windows (rank, shard, start, loss), for people and tools.
pub const LIST_FILE: &str = "windows.json";

/// The directory `mine_hard` writes into: `<data_root>/hard_examples/`.
pub fn dir(data_root: &Path) -> Result<PathBuf> {
    manifest::manifest_path(data_root, STEP)
        .parent()
        .map(Path::to_path_buf)
        .context("the hard examples' directory has no parent")
}

/// What the manifest records about the windows, and what a later chunk checks before
/// mixing them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mined {
    /// The chunk whose training windows were scored.
    pub chunk: u64,
    /// The windows are `seq_len + 1` tokens.
    pub seq_len: u64,
    /// How many times each window is repeated in `windows.bin`.
    pub upsample: u64,
}

impl Mined {
    /// The manifest's extra fields.
    pub fn to_extra(self) -> serde_json::Map<String, Value> {
        serde_json::Map::from_iter([
            ("chunk".to_string(), json!(self.chunk)),
            ("seq_len".to_string(), json!(self.seq_len)),
            ("upsample".to_string(), json!(self.upsample)),
        ])
    }

    /// Read back from a manifest; `None` when it lacks the chunk or the window length
    /// (`upsample` defaults to 1).
    fn from_manifest(m: &StepManifest) -> Option<Mined> {
        let field = |k: &str| m.extra.get(k).and_then(Value::as_u64);
        Some(Mined {
            chunk: field("chunk")?,
            seq_len: field("seq_len")?,
            upsample: field("upsample").unwrap_or(1),
        })
    }
}

pub fn run_file(run_dir: &Path) -> PathBuf {
    run_dir.join(RUN_FILE)
}

/// Why a `mine_hard` output is or is not mixed into this run.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// Mix these windows (the file and the chunk they were mined from).
    Use { path: PathBuf, chunk: u64 },
    /// Nothing to mix, with the reason (`None` when there is simply no `mine_hard` output).
    Skip(Option<String>),
}

/// Decides from `mine_hard`'s manifest whether its windows belong in a run of `chunk`
/// with windows of `seq_len + 1` tokens: only windows mined on an earlier chunk, of the
/// same length.
pub fn choose(data_root: &Path, chunk: u8, seq_len: usize) -> Result<Choice> {
    let m = match manifest::read(data_root, STEP) {
        Ok(Some(m)) => m,
        Ok(None) => return Ok(Choice::Skip(None)),
        Err(e) => {
            return Ok(Choice::Skip(Some(format!(
                "the hard examples' manifest is unreadable ({e}); rerun mine_hard"
            ))));
        }
    };
    let Some(Mined {
        chunk: mined,
        seq_len: len,
        ..
    }) = Mined::from_manifest(&m)
    else {
        return Ok(Choice::Skip(Some(
            "the hard examples' manifest does not say which chunk and seq_len they are from; rerun mine_hard".into(),
        )));
    };
    if mined >= u64::from(chunk) {
        return Ok(Choice::Skip(Some(format!(
            "the hard examples were mined on chunk {mined}; chunk {chunk} mixes in only those of an earlier chunk"
        ))));
    }
    if len != seq_len as u64 {
        return Ok(Choice::Skip(Some(format!(
            "the hard examples are windows of seq_len {len}, this run uses {seq_len}; rerun mine_hard with training.seq_len={seq_len}"
        ))));
    }
    Ok(Choice::Use {
        path: dir(data_root)?.join(WINDOWS_FILE),
        chunk: mined,
    })
}

/// Copies `from` to the run's [`RUN_FILE`] (temp, sync, rename), or removes a stale copy
/// when `from` is `None`.
pub fn take(run_dir: &Path, from: Option<&Path>) -> Result<()> {
    let dest = run_file(run_dir);
    let Some(from) = from else {
        return match std::fs::remove_file(&dest) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("could not remove {}", dest.display()))
            }
            _ => Ok(()),
        };
    };
    let tmp = run_dir.join(format!(".{RUN_FILE}.tmp"));
    std::fs::copy(from, &tmp).with_context(|| {
        format!(
            "could not copy the hard examples {} to {}",
            from.display(),
            tmp.display()
        )
    })?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("could not sync {}", tmp.display()))?;
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

    fn mined(root: &Path, extra: Value) {
        let mut m = StepManifest {
            step: STEP.into(),
            version: 1,
            config_hash: "x".into(),
            inputs: vec![],
            counts: Default::default(),
            outputs: vec![WINDOWS_FILE.into()],
            finished_at: "2026-01-01T00:00:00Z".into(),
            extra: Default::default(),
        };
        if let Value::Object(map) = extra {
            m.extra = map;
        }
        manifest::write(root, &m).unwrap();
    }

    #[test]
    fn only_an_earlier_chunk_of_the_same_window_length_is_mixed_in() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        assert_eq!(choose(root, 2, 64).unwrap(), Choice::Skip(None));
        let written = Mined {
            chunk: 1,
            seq_len: 64,
            upsample: 2,
        };
        mined(root, Value::Object(written.to_extra()));
        let want = root
            .join(lavender::data_root::HARD_EXAMPLES)
            .join(WINDOWS_FILE);
        assert_eq!(
            choose(root, 2, 64).unwrap(),
            Choice::Use {
                path: want,
                chunk: 1
            }
        );
        let skip = |c: Choice| match c {
            Choice::Skip(Some(why)) => why,
            other => panic!("expected a reason to skip, got {other:?}"),
        };
        assert!(skip(choose(root, 1, 64).unwrap()).contains("earlier chunk"));
        assert!(skip(choose(root, 2, 32).unwrap()).contains("seq_len=32"));
        mined(root, json!({}));
        assert!(skip(choose(root, 2, 64).unwrap()).contains("rerun mine_hard"));
    }
}
