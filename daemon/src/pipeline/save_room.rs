//! Room for the next save: what it needs (its size, taken as the newest checkpoint's,
//! × 1.1, plus `notify.disk_floor_mib`), what is free on the data root's filesystem,
//! and early retention when it does not fit: the checkpoints the next save's own
//! retention would drop, dropped now (`keep_checkpoints − 1` kept, and always the
//! newest, the best and the newest verified: `enforce_retention`'s rules). Read on
//! the blocking pool (`check`); the actor acts on the [`DiskCheck`] it reports back
//! (`actor/disk_wait.rs`).

use std::path::{Path, PathBuf};

use lavender::checkpoint::{dir_size, list_run_checkpoints};

const MIB: u64 = 1024 * 1024;

/// The bytes the next save needs free: its size × 1.1 + the floor.
pub(crate) fn save_need(next_save_bytes: Option<u64>, floor_mib: u64) -> u64 {
    // A tenth over: a save grows a little as training goes (a history appended).
    let save = next_save_bytes.map_or(0, |b| b.saturating_add(b.div_ceil(10)));
    save.saturating_add(floor_mib.saturating_mul(MIB))
}

/// What a check reads, and may delete.
#[derive(Debug, Clone)]
pub(crate) struct CheckInput {
    pub data_root: PathBuf,
    pub run_dir: Option<PathBuf>,
    pub floor_mib: u64,
    /// `training.keep_checkpoints` when early retention may delete (not in observe
    /// mode, and only a run under the checkpoints root); `None`: it may not.
    pub keep: Option<usize>,
    pub asked: Asked,
}

/// Who asked for a check, and the need it brings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// The watchdog, while a worker runs: the next save looks short.
    Watchdog,
    /// A wait for space, right after a save found the disk full: when the estimate
    /// says the save fits in what is free now, it was wrong (the save did not fit),
    /// so the wait asks for more than is free now.
    WaitFirst,
    /// A later check of the wait, with the need its first check set.
    Wait { at_least: Option<u64> },
}

impl Asked {
    /// Asked by a wait for space (see [`DiskCheck::for_wait`]).
    pub(crate) fn by_wait(self) -> bool {
        self != Asked::Watchdog
    }
}

/// What a check found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DiskCheck {
    /// The data root, whose filesystem is read.
    pub path: PathBuf,
    pub next_save_bytes: Option<u64>,
    pub need_bytes: u64,
    /// Free after early retention; `None` when the filesystem could not be read.
    pub free_bytes: Option<u64>,
    /// Free before early retention.
    pub free_before: Option<u64>,
    /// The checkpoints early retention deleted, oldest first.
    pub dropped: Vec<PathBuf>,
    /// Early retention was due but could not run, or failed: why.
    pub retention_error: Option<String>,
    /// Asked by a wait for space. A check asked while the worker ran that comes back
    /// once it has ended is not the wait's: it lacks the wait's need.
    pub for_wait: bool,
}

impl DiskCheck {
    /// The wait for space as the status shows it after this check, waiting since
    /// `since` (RFC 3339).
    pub(crate) fn shown(&self, since: String) -> lavender::status::DiskWait {
        lavender::status::DiskWait {
            path: self.path.clone(),
            need_bytes: self.need_bytes,
            free_bytes: self.free_bytes,
            since,
            message: self.waiting_message(),
        }
    }

    /// What a wait for space says after this check.
    pub(crate) fn waiting_message(&self) -> String {
        format!(
            "a save found the disk full; the next save {}; waiting (the latest verified checkpoint is as it was)",
            self.numbers()
        )
    }

    /// The next save fits. A filesystem that cannot be read is given the benefit
    /// of the doubt: the worker's own write will tell.
    pub(crate) fn fits(&self) -> bool {
        self.free_bytes.is_none_or(|f| f >= self.need_bytes)
    }

    /// "needs 480 MiB (the last save 436 MiB × 1.1 + notify.disk_floor_mib); 310 MiB free under /data".
    pub(crate) fn numbers(&self) -> String {
        let free = self.free_bytes.map_or("unknown".to_string(), bytes);
        format!(
            "needs {}; {free} free under {}",
            bytes(self.need_bytes),
            self.path.display()
        )
    }
}

/// `1288490188` → `1.2 GiB`, and under a MiB the bytes themselves (a small
/// filesystem's numbers would all read `0 MiB`).
pub(crate) fn bytes(n: u64) -> String {
    if n < MIB {
        format!("{n} bytes")
    } else {
        crate::push::format::bytes(n)
    }
}

/// Reads the filesystem, and applies early retention when the next save does not
/// fit. Blocking: run it on the blocking pool.
pub(crate) fn check(input: &CheckInput) -> DiskCheck {
    let run = input.run_dir.as_deref().filter(|d| d.is_dir());
    let next_save_bytes = run.and_then(newest_checkpoint_bytes);
    let on = run.unwrap_or(&input.data_root);
    let free_before = crate::filesystem::avail_bytes(on);
    let at_least = match input.asked {
        Asked::Wait { at_least } => at_least.unwrap_or(0),
        Asked::Watchdog | Asked::WaitFirst => 0,
    };
    let mut need = save_need(next_save_bytes, input.floor_mib).max(at_least);
    if input.asked == Asked::WaitFirst
        && let Some(free) = free_before.filter(|f| *f >= need)
    {
        // It did not fit a moment ago: ask for a tenth of a save (at least 1 MiB) more.
        need = free.saturating_add((next_save_bytes.unwrap_or(0) / 10).max(MIB));
    }
    let mut found = DiskCheck {
        path: input.data_root.clone(),
        next_save_bytes,
        need_bytes: need,
        free_bytes: free_before,
        free_before,
        dropped: Vec::new(),
        retention_error: None,
        for_wait: input.asked.by_wait(),
    };
    if found.fits() {
        return found;
    }
    let (Some(run), Some(keep)) = (run, input.keep) else {
        return found;
    };
    match crate::checkpoints::retain::early(run, keep) {
        Ok(dropped) => found.dropped = dropped,
        Err(e) => found.retention_error = Some(e.to_string()),
    }
    if !found.dropped.is_empty() {
        found.free_bytes = crate::filesystem::avail_bytes(on);
    }
    found
}

/// The size of the run's newest complete checkpoint: what the next save will take.
fn newest_checkpoint_bytes(run: &Path) -> Option<u64> {
    let newest = list_run_checkpoints(run).ok()?.pop()?;
    Some(dir_size(&newest.path)).filter(|s| *s > 0)
}

/// The step the next save is due at: in the stage `step` is in (stages run in
/// order; `stages`: each one's steps and `checkpoint_every`), the next multiple of
/// its interval, or its end.
pub(crate) fn save_due_at(stages: &[(u64, u64)], step: u64) -> Option<u64> {
    let mut offset = 0u64;
    for (i, &(steps, every)) in stages.iter().enumerate() {
        if step < offset + steps || i + 1 == stages.len() {
            let local = step.saturating_sub(offset);
            let due = offset + (local / every.max(1) + 1) * every.max(1);
            return Some(due.min(offset + steps).max(step + 1));
        }
        offset += steps;
    }
    None
}

/// `config`'s stages as [`save_due_at`] reads them.
pub(crate) fn stages_of(config: &lavender::config::Config) -> Vec<(u64, u64)> {
    (0..config.training.stages.len())
        .map(|i| {
            (
                config.stage_steps(i),
                config.training.stages[i].checkpoint_every,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::checkpoint::{CheckpointBuilder, CheckpointName};
    use lavender::trainer_state::TrainerState;

    #[test]
    fn the_need_is_the_save_and_a_tenth_plus_the_floor() {
        assert_eq!(save_need(None, 0), 0);
        assert_eq!(save_need(None, 2), 2 * MIB);
        assert_eq!(save_need(Some(1000), 0), 1100);
        assert_eq!(save_need(Some(100 * MIB), 1), 111 * MIB);
    }

    fn save(run: &Path, counter: u32, bytes: usize) -> PathBuf {
        let name = CheckpointName::new(
            "pretrain",
            chrono::NaiveTime::from_hms_opt(12, 0, counter).unwrap(),
            counter,
        )
        .unwrap();
        let b = CheckpointBuilder::begin(run, &name).unwrap();
        std::fs::write(b.dir().join("model.safetensors"), vec![7u8; bytes]).unwrap();
        b.commit(&TrainerState::new("pretrain", counter as u64 * 10))
            .unwrap()
    }

    fn input(root: &Path, run: &Path, keep: Option<usize>, floor_mib: u64) -> CheckInput {
        CheckInput {
            data_root: root.to_path_buf(),
            run_dir: Some(run.to_path_buf()),
            floor_mib,
            keep,
            asked: Asked::Wait { at_least: None },
        }
    }

    #[test]
    fn a_save_that_fits_deletes_nothing() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("checkpoints/run-a");
        std::fs::create_dir_all(&run).unwrap();
        let paths: Vec<_> = (1..=3).map(|c| save(&run, c, 4096)).collect();
        let found = check(&input(root.path(), &run, Some(3), 0));
        assert!(found.fits(), "{found:?}");
        assert!(found.dropped.is_empty());
        assert!(found.next_save_bytes.unwrap() >= 4096);
        assert!(paths.iter().all(|p| p.is_dir()));
    }

    #[test]
    fn a_save_that_does_not_fit_drops_what_its_retention_would_and_keeps_the_newest() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("checkpoints/run-a");
        std::fs::create_dir_all(&run).unwrap();
        let paths: Vec<_> = (1..=3).map(|c| save(&run, c, 4096)).collect();
        // A floor no disk has: never fits, so early retention runs.
        let found = check(&input(root.path(), &run, Some(2), u64::MAX / MIB));
        assert!(!found.fits());
        assert_eq!(found.dropped, paths[..2].to_vec(), "{found:?}");
        assert!(paths[2].is_dir(), "the newest stays");
        // Nothing more to drop: the newest always stays, whatever `keep`.
        let again = check(&input(root.path(), &run, Some(1), u64::MAX / MIB));
        assert!(again.dropped.is_empty() && paths[2].is_dir(), "{again:?}");
        // Without leave to delete (observe mode): nothing goes.
        let run_b = root.path().join("checkpoints/run-b");
        std::fs::create_dir_all(&run_b).unwrap();
        let kept: Vec<_> = (1..=3).map(|c| save(&run_b, c, 4096)).collect();
        let found = check(&input(root.path(), &run_b, None, u64::MAX / MIB));
        assert!(found.dropped.is_empty() && kept.iter().all(|p| p.is_dir()));
        assert!(
            found.numbers().contains("free under"),
            "{}",
            found.numbers()
        );
    }

    #[test]
    fn after_a_full_disk_an_estimate_that_fits_asks_for_more_than_is_free() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("checkpoints/run-a");
        std::fs::create_dir_all(&run).unwrap();
        save(&run, 1, 4096);
        let mut i = input(root.path(), &run, None, 0);
        i.asked = Asked::WaitFirst;
        let found = check(&i);
        assert!(!found.fits(), "{found:?}");
        assert!(found.need_bytes > found.free_before.unwrap());
        // Kept by the later checks of the wait.
        let mut later = input(root.path(), &run, None, 0);
        later.asked = Asked::Wait {
            at_least: Some(found.need_bytes),
        };
        assert_eq!(check(&later).need_bytes, found.need_bytes);
    }

    #[test]
    fn the_save_due_is_the_next_multiple_in_the_stage() {
        let stages = [(100, 30), (20, 10)];
        assert_eq!(save_due_at(&stages, 0), Some(30));
        assert_eq!(save_due_at(&stages, 61), Some(90));
        assert_eq!(save_due_at(&stages, 95), Some(100));
        assert_eq!(save_due_at(&stages, 100), Some(110));
        assert_eq!(save_due_at(&stages, 4_150), Some(4_151));
        assert_eq!(save_due_at(&[], 5), None);
    }
}
