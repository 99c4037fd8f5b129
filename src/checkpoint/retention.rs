//! Retention: keep the newest `keep` complete checkpoints of a run, and always the
//! newest one and, in each stage, the one with the lowest validation loss (losses of
//! different stages measure different things: pretraining text, SFT responses, DPO
//! preferences). A checkpoint's validation loss is the one evaluated at its own step
//! (`trainer_state.json`'s `val_loss`); one without is never "best". Clears
//! temporary directories left by killed saves once they are older than a grace period.
//! In a run the daemon reads back (`verdicts`), nothing older than the newest
//! checkpoint found intact goes before it, and that one stays. The newest checkpoint
//! a restore drill passed on, and any a drill reads now, stay (`drills`).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::listing::list_run_checkpoints;
use super::{drills, verdicts};
use crate::atomic::TMP_PREFIX;
use crate::error::{Error, IoContext, Result};

pub const DEFAULT_KEEP: usize = 3;

#[derive(Debug, Clone)]
pub struct RetentionPolicy {
    pub keep: usize,
    /// A temporary directory younger than this may be a save in flight: never touched.
    pub tmp_grace: Duration,
}

impl RetentionPolicy {
    pub fn keep(keep: usize) -> Self {
        RetentionPolicy {
            keep,
            tmp_grace: Duration::from_secs(3600),
        }
    }
}

/// `enforce_retention_with` with the default one-hour grace for temporary directories.
pub fn enforce_retention(run_dir: &Path, keep: usize) -> Result<Vec<PathBuf>> {
    enforce_retention_with(run_dir, &RetentionPolicy::keep(keep))
}

/// Apply the policy to `run_dir`; returns the checkpoints this call deleted.
/// Safe to run from two processes at once: whatever vanished underneath is skipped.
pub fn enforce_retention_with(run_dir: &Path, policy: &RetentionPolicy) -> Result<Vec<PathBuf>> {
    let ckpts = list_run_checkpoints(run_dir)?;
    let mut keep: HashSet<&Path> = ckpts
        .iter()
        .rev()
        .take(policy.keep)
        .map(|c| c.path.as_path())
        .collect();
    if let Some(newest) = ckpts.last() {
        keep.insert(&newest.path);
    }
    let mut best: HashMap<&str, (f64, &Path)> = HashMap::new();
    for c in &ckpts {
        let Some(loss) = c.state.val_loss.filter(|v| v.is_finite()) else {
            continue;
        };
        let slot = best
            .entry(c.state.stage.as_str())
            .or_insert((loss, c.path.as_path()));
        if loss < slot.0 {
            *slot = (loss, c.path.as_path());
        }
    }
    keep.extend(best.into_values().map(|(_, path)| path));
    // Verified before anything older goes: in a run a verifier reads back
    // (`verdicts`), the newest checkpoint found intact and every newer one (pending,
    // or damaged and waiting to be set aside) stay; with none found intact yet, all do.
    if verdicts::watched(run_dir) {
        let from = verdicts::newest_good(run_dir, &ckpts).unwrap_or(0);
        keep.extend(ckpts[from..].iter().map(|c| c.path.as_path()));
    }
    // Drilled: the newest checkpoint a restore drill resumed, and any a drill reads.
    keep.extend(drills::kept(run_dir, &ckpts));

    let mut dropped = Vec::new();
    for c in &ckpts {
        if !keep.contains(c.path.as_path()) && remove_dir(run_dir, &c.path)? {
            dropped.push(c.path.clone());
        }
    }
    clear_stale_temporaries(run_dir, policy.tmp_grace)?;
    Ok(dropped)
}

/// Remove a checkpoint by first renaming it to a temporary name, so no reader ever
/// sees it half-deleted. Returns false when another process got there first.
fn remove_dir(run_dir: &Path, dir: &Path) -> Result<bool> {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let doomed = run_dir.join(format!("{TMP_PREFIX}drop-{name}-{}", std::process::id()));
    match fs::rename(dir, &doomed) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("move aside for deletion", dir, e)),
    }
    match fs::remove_dir_all(&doomed) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(Error::io("delete", &doomed, e)),
    }
}

fn clear_stale_temporaries(run_dir: &Path, grace: Duration) -> Result<()> {
    let now = SystemTime::now();
    for entry in fs::read_dir(run_dir).ctx("list", run_dir)? {
        let Ok(entry) = entry else { continue };
        if !entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            continue;
        }
        let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        if now.duration_since(modified).unwrap_or_default() <= grace {
            continue;
        }
        let path = entry.path();
        let res = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        match res {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("delete stale temporary", &path, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::listing::tests::{save, set_mtime};
    use super::*;
    use crate::checkpoint::CheckpointBuilder;
    use crate::checkpoint::CheckpointName;

    fn run_dir() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-04-24_16-08-45");
        fs::create_dir_all(&run).unwrap();
        (root, run)
    }

    fn names(run: &Path) -> Vec<String> {
        list_run_checkpoints(run)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn five_saves_keep_three_dropping_the_two_oldest() {
        let (_root, run) = run_dir();
        let paths: Vec<_> = (1..=5).map(|c| save(&run, "pretrain", c, None)).collect();
        for (i, p) in paths.iter().enumerate() {
            set_mtime(p, 1_000 + i as u64);
        }
        let dropped = enforce_retention(&run, 3).unwrap();
        assert_eq!(dropped, paths[..2].to_vec());
        assert_eq!(
            names(&run),
            [
                "pretrain-12-00-03-0003",
                "pretrain-12-00-04-0004",
                "pretrain-12-00-05-0005"
            ]
        );
        // Idempotent.
        assert!(enforce_retention(&run, 3).unwrap().is_empty());
    }

    #[test]
    fn best_by_validation_is_kept_beyond_keep() {
        let (_root, run) = run_dir();
        let losses = [Some(2.0), Some(0.5), Some(1.5), Some(1.0), None];
        let paths: Vec<_> = losses
            .iter()
            .enumerate()
            .map(|(i, l)| save(&run, "pretrain", i as u32 + 1, *l))
            .collect();
        for (i, p) in paths.iter().enumerate() {
            set_mtime(p, 1_000 + i as u64);
        }
        let dropped = enforce_retention(&run, 2).unwrap();
        assert_eq!(dropped, vec![paths[0].clone(), paths[2].clone()]);
        let kept = names(&run);
        assert!(
            kept.contains(&"pretrain-12-00-02-0002".to_string()),
            "best kept: {kept:?}"
        );
        assert_eq!(kept.len(), 3);
    }

    #[test]
    fn each_stage_keeps_its_own_best() {
        let (_root, run) = run_dir();
        // SFT's losses are lower than pretraining's, but not better pretraining.
        let saves = [
            ("pretrain", Some(3.0)),
            ("pretrain", Some(2.5)),
            ("pretrain", Some(2.8)),
            ("sft", Some(1.2)),
            ("sft", Some(1.0)),
            ("sft", Some(1.1)),
            ("dpo", None),
        ];
        let paths: Vec<_> = saves
            .iter()
            .enumerate()
            .map(|(i, (stage, l))| {
                let p = save(&run, stage, i as u32 + 1, *l);
                set_mtime(&p, 1_000 + i as u64);
                p
            })
            .collect();
        enforce_retention(&run, 1).unwrap();
        let kept: Vec<_> = list_run_checkpoints(&run)
            .unwrap()
            .into_iter()
            .map(|c| c.path)
            .collect();
        assert_eq!(
            kept,
            [paths[1].clone(), paths[4].clone(), paths[6].clone()],
            "pretraining's best, SFT's best, the newest"
        );
    }

    #[test]
    fn equal_mtimes_are_ordered_by_counter() {
        let (_root, run) = run_dir();
        let paths: Vec<_> = [4, 2, 5, 1, 3]
            .iter()
            .map(|&c| save(&run, "sft", c, None))
            .collect();
        for p in &paths {
            set_mtime(p, 5_000);
        }
        enforce_retention(&run, 2).unwrap();
        assert_eq!(names(&run), ["sft-12-00-04-0004", "sft-12-00-05-0005"]);
    }

    #[test]
    fn keep_zero_still_keeps_the_newest() {
        let (_root, run) = run_dir();
        for c in 1..=3 {
            let p = save(&run, "dpo", c, None);
            set_mtime(&p, 100 + c as u64);
        }
        enforce_retention(&run, 0).unwrap();
        assert_eq!(names(&run), ["dpo-12-00-03-0003"]);
    }

    #[test]
    fn temporary_in_flight_is_never_deleted_but_stale_ones_are() {
        let (_root, run) = run_dir();
        for c in 1..=4 {
            save(&run, "pretrain", c, None);
        }
        let name: CheckpointName = "pretrain-12-00-05-0005".parse().unwrap();
        let inflight = CheckpointBuilder::begin(&run, &name).unwrap();
        fs::write(inflight.dir().join("model.safetensors"), b"half").unwrap();
        enforce_retention(&run, 1).unwrap();
        assert!(
            inflight.dir().exists(),
            "a save in flight survives retention"
        );

        let policy = RetentionPolicy {
            keep: 1,
            tmp_grace: Duration::ZERO,
        };
        std::thread::sleep(Duration::from_millis(20));
        enforce_retention_with(&run, &policy).unwrap();
        assert!(!inflight.dir().exists(), "a stale temporary is cleared");
        assert_eq!(names(&run).len(), 1);
    }

    /// Checkpoint `c` of `run`, completed at second 1000 + `c`, with a manifest.
    fn saved_with_manifest(run: &Path, c: u32) -> PathBuf {
        use crate::checkpoint::contents::{self, HashAlgorithm};
        let p = save(run, "pretrain", c, None);
        set_mtime(&p, 1_000 + c as u64);
        let m = contents::build_from_disk(&p, HashAlgorithm::Blake3).unwrap();
        contents::write(&p, &m).unwrap();
        p
    }

    /// `keep_checkpoints: 1`: a newer checkpoint that is pending or damaged does not
    /// cost the older verified one; once a newer one verifies, the older goes.
    #[test]
    fn a_newer_checkpoint_that_never_verifies_does_not_cost_the_older_verified_one() {
        let (_root, run) = run_dir();
        let with_manifest = |c: u32| saved_with_manifest(&run, c);
        let first = with_manifest(1);
        let listed = |run: &Path| list_run_checkpoints(run).unwrap();
        verdicts::verify_and_record(&listed(&run)[0]).unwrap();
        let second = with_manifest(2);
        // Pending: the verified one stays.
        assert!(enforce_retention(&run, 1).unwrap().is_empty());
        // Damaged once read back: it still stays, and so does the damaged one.
        fs::write(second.join("model.safetensors"), b"torn").unwrap();
        verdicts::verify_and_record(&listed(&run)[1]).unwrap();
        let third = with_manifest(3);
        assert!(enforce_retention(&run, 1).unwrap().is_empty());
        assert_eq!(names(&run).len(), 3);
        // The newest verifies: what is older goes.
        verdicts::verify_and_record(&listed(&run)[2]).unwrap();
        assert_eq!(enforce_retention(&run, 1).unwrap(), [first, second]);
        assert_eq!(listed(&run)[0].path, third);
    }

    /// A run the daemon reads back is watched from before its first save: with
    /// `keep_checkpoints: 1`, a second save while the first is still being hashed
    /// keeps both (before, nothing protected a run until its first verdict, and the
    /// second save could delete the first unread); once the second verifies, the
    /// first goes. An unwatched run (a worker alone) prunes as before.
    #[test]
    fn a_watched_run_keeps_everything_until_a_checkpoint_verifies() {
        let (_root, run) = run_dir();
        let with_manifest = |c: u32| saved_with_manifest(&run, c);
        verdicts::watch(&run).unwrap();
        let first = with_manifest(1);
        assert!(enforce_retention(&run, 1).unwrap().is_empty());
        let second = with_manifest(2);
        assert!(
            enforce_retention(&run, 1).unwrap().is_empty(),
            "nothing read back yet"
        );
        let listed = list_run_checkpoints(&run).unwrap();
        verdicts::verify_and_record(&listed[1]).unwrap();
        assert_eq!(enforce_retention(&run, 1).unwrap(), [first]);
        assert_eq!(list_run_checkpoints(&run).unwrap()[0].path, second);

        let (_root, alone) = run_dir();
        for c in 1..=2 {
            let p = save(&alone, "pretrain", c, None);
            set_mtime(&p, 1_000 + c as u64);
        }
        assert_eq!(enforce_retention(&alone, 1).unwrap().len(), 1, "unwatched");
    }

    #[test]
    fn concurrent_retention_is_safe() {
        let (_root, run) = run_dir();
        for c in 1..=30 {
            let p = save(&run, "pretrain", c, None);
            set_mtime(&p, 1_000 + c as u64);
        }
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let run = run.clone();
                std::thread::spawn(move || enforce_retention(&run, 3).unwrap().len())
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 27, "each checkpoint is dropped exactly once");
        assert_eq!(names(&run).len(), 3);
    }
}
