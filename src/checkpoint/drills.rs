//! Restore drills: a kept checkpoint resumed in a sandbox (`lavenderd drill`), its
//! first trained steps compared with the values the run recorded for them
//! (`crate::replay`). What a drill found is `<run>/.drill.<name>.json`, beside the
//! checkpoint's read-back verdict; while a drill reads a checkpoint,
//! `<run>/.drilling.<name>` says so. Retention — the daemon's and
//! `lavender-worker`'s own — keeps the newest checkpoint whose drill passed and every
//! one a drill is reading.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::listing::Checkpoint;
use crate::error::Result;

/// The start of a drill verdict's file name in the run directory.
pub const PREFIX: &str = ".drill.";
/// The start of the marker of a drill reading a checkpoint.
pub const READING: &str = ".drilling.";

/// What a drill found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrillVerdict {
    /// Every compared step agreed.
    pub passed: bool,
    /// Steps compared.
    pub steps: u64,
    /// `step S loss A vs B`, when one differed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
    /// `exact` or `relative R`.
    pub tolerance: String,
    /// The largest relative difference between a drilled step and the run's.
    #[serde(default)]
    pub largest_difference: f64,
    /// When it ended (RFC 3339 UTC).
    pub at: String,
}

impl DrillVerdict {
    /// For `lavenderd checkpoints`: `drilled` / `drill failed: step S loss A vs B`.
    pub fn describe(&self) -> String {
        match &self.mismatch {
            None if self.passed => "drilled".to_string(),
            Some(m) => format!("drill failed: {m}"),
            None => "drill failed".to_string(),
        }
    }
}

fn path(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join(format!("{PREFIX}{name}.json"))
}

fn reading_path(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join(format!("{READING}{name}"))
}

/// The recorded drill of checkpoint `name` of `run_dir` (none, or unreadable: `None`).
pub fn read(run_dir: &Path, name: &str) -> Option<DrillVerdict> {
    let bytes = std::fs::read(path(run_dir, name)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Records what a drill of `name` found.
pub fn record(run_dir: &Path, name: &str, verdict: &DrillVerdict) -> Result<()> {
    crate::atomic::write_json(&path(run_dir, name), verdict)
}

/// Says a drill reads checkpoint `name` until the guard is dropped: retention keeps it.
pub fn reading(run_dir: &Path, name: &str) -> Result<Reading> {
    let path = reading_path(run_dir, name);
    crate::atomic::write_file(&path, b"a restore drill reads this checkpoint\n")?;
    Ok(Reading { path })
}

/// A drill's hold on a checkpoint ([`reading`]).
#[derive(Debug)]
pub struct Reading {
    path: PathBuf,
}

impl Drop for Reading {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The checkpoints of `ckpts` retention keeps for drills: the newest whose drill
/// passed, and those a drill reads now.
pub fn kept<'a>(run_dir: &Path, ckpts: &'a [Checkpoint]) -> Vec<&'a Path> {
    let mut kept: Vec<&Path> = ckpts
        .iter()
        .filter(|c| reading_path(run_dir, &c.name).exists())
        .map(|c| c.path.as_path())
        .collect();
    if let Some(newest) = ckpts
        .iter()
        .rev()
        .find(|c| read(run_dir, &c.name).is_some_and(|d| d.passed))
    {
        kept.push(&newest.path);
    }
    kept
}

/// Drops the drill records of checkpoints no longer in the run; `names` are those that are.
pub fn forget_others(run_dir: &Path, names: &[&str]) {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(name) = file
            .strip_prefix(PREFIX)
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        if !names.contains(&name) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::listing::tests::save;
    use super::*;
    use crate::checkpoint::enforce_retention;

    fn verdict(passed: bool) -> DrillVerdict {
        DrillVerdict {
            passed,
            steps: 3,
            mismatch: (!passed).then(|| "step 11 loss 2 vs 3".to_string()),
            tolerance: "exact".into(),
            largest_difference: 0.0,
            at: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn retention_keeps_the_newest_drilled_and_any_a_drill_reads() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run-2026-01-01_00-00-00");
        let paths: Vec<PathBuf> = (1..=6).map(|i| save(&run, "pretrain", i, None)).collect();
        let name = |i: usize| paths[i].file_name().unwrap().to_string_lossy().into_owned();
        record(&run, &name(0), &verdict(true)).unwrap();
        record(&run, &name(1), &verdict(true)).unwrap();
        record(&run, &name(2), &verdict(false)).unwrap();
        let reading = reading(&run, &name(3)).unwrap();
        let dropped = enforce_retention(&run, 1).unwrap();
        // Kept: the newest (6), the newest drilled that passed (2), the one read (4).
        let left: Vec<bool> = paths.iter().map(|p| p.exists()).collect();
        assert_eq!(left, [false, true, false, true, false, true], "{dropped:?}");
        assert_eq!(
            read(&run, &name(2)).unwrap().describe(),
            "drill failed: step 11 loss 2 vs 3"
        );
        assert_eq!(read(&run, &name(1)).unwrap().describe(), "drilled");
        drop(reading);
        enforce_retention(&run, 1).unwrap();
        assert!(!paths[3].exists());
        forget_others(&run, &[name(1).as_str()]);
        assert!(read(&run, &name(0)).is_none() && read(&run, &name(1)).is_some());
    }
}
