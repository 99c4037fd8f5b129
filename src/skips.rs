//! `<run>/skipped.json`: the data a run skipped after rolling back from a
//! divergence. The daemon appends a range when it rolls a diverged worker back to
//! a checkpoint; the worker applies it when it resumes from that checkpoint, so
//! every later stop and resume replays exactly the same data order.
//!
//! A range `{from_step, to_step}` says: a worker resuming from a checkpoint at
//! global step `from_step` advances its data past the batches that steps
//! `from_step + 1 ..= to_step` consumed before the rollback, then trains step
//! `from_step + 1` on the batch that follows them. Ranges with the same
//! `from_step` apply one after another in file order (a second rollback to the
//! same checkpoint skips past the first attempt's batches too). A checkpoint
//! records in its `trainer_state.json` (`skips_applied`) how many ranges of this
//! file its data cursor already includes, so no range is applied twice.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};

/// File name of the record inside a run directory.
pub const FILE: &str = "skipped.json";

/// The `trainer_state.json` key counting the ranges a checkpoint's cursor includes.
pub const APPLIED_KEY: &str = "skips_applied";

/// How many ranges of the record the checkpoint whose state this is already
/// includes (0 for a checkpoint that does not say: saved before any rollback).
pub fn applied(state: &crate::trainer_state::TrainerState) -> usize {
    state
        .extra
        .get(APPLIED_KEY)
        .and_then(serde_json::Value::as_u64)
        .map_or(0, |n| n as usize)
}

/// One rollback's skipped data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkipRange {
    /// The step of the checkpoint the run rolled back to.
    pub from_step: u64,
    /// The step at which the divergence was detected: its batch is skipped too.
    pub to_step: u64,
    /// The checkpoint rolled back to (its directory name).
    pub checkpoint: String,
    /// Why, in one line ("loss 9.81 > 3 × median 2.10 for 2 steps at step 140").
    pub reason: String,
    /// RFC 3339 UTC time the rollback was decided.
    pub at: String,
}

impl SkipRange {
    /// Optimizer steps' worth of data this range skips.
    pub fn steps(&self) -> u64 {
        self.to_step.saturating_sub(self.from_step)
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Skips {
    pub ranges: Vec<SkipRange>,
}

/// `<run_dir>/skipped.json`.
pub fn path(run_dir: &Path) -> PathBuf {
    run_dir.join(FILE)
}

/// Reads the record; a run without one skipped nothing.
pub fn read(run_dir: &Path) -> Result<Skips> {
    let p = path(run_dir);
    match std::fs::read(&p) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Malformed {
            path: p,
            reason: crate::heartbeat::json_reason(&e),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Skips::default()),
        Err(e) => Err(e).ctx("read skipped-data record", &p),
    }
}

/// Appends `range` to the record (atomically: temp file, fsync, rename).
pub fn append(run_dir: &Path, range: SkipRange) -> Result<Skips> {
    let mut skips = read(run_dir)?;
    skips.ranges.push(range);
    crate::atomic::write_json(&path(run_dir), &skips)?;
    Ok(skips)
}

impl Skips {
    /// The ranges a worker resuming from a checkpoint at `step`, whose cursor
    /// already includes the first `applied` ranges, must still apply, in order.
    pub fn to_apply(&self, step: u64, applied: usize) -> impl Iterator<Item = &SkipRange> {
        self.ranges
            .iter()
            .skip(applied)
            .filter(move |r| r.from_step == step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(from: u64, to: u64) -> SkipRange {
        SkipRange {
            from_step: from,
            to_step: to,
            checkpoint: format!("pretrain-00-00-00-{from:04}"),
            reason: "test".into(),
            at: "2026-12-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_run_without_a_record_skipped_nothing_and_appends_keep_order() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), Skips::default());
        append(dir.path(), range(100, 140)).unwrap();
        let skips = append(dir.path(), range(100, 120)).unwrap();
        assert_eq!(read(dir.path()).unwrap(), skips);
        let steps: Vec<u64> = skips.to_apply(100, 0).map(SkipRange::steps).collect();
        assert_eq!(steps, [40, 20]);
        assert_eq!(skips.to_apply(100, 1).count(), 1);
        assert_eq!(skips.to_apply(200, 0).count(), 0);
    }

    #[test]
    fn a_malformed_record_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), b"{\"ranges\": [").unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(err.contains(FILE), "{err}");
    }
}
