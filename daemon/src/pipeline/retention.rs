//! Checkpoint retention enforced by the daemon (`supervisor.retention: daemon`).
//!
//! A follower tails the current run's `events.jsonl`; after a `checkpoint_saved` or
//! `final_saved` event it applies the run's `training.keep_checkpoints` + newest +
//! best-by-validation-loss rules with [`lavender::checkpoint::enforce_retention_with`],
//! the same code `lavender-worker` runs, then logs `RETAIN dropped N old ckpt(s)` in
//! the run's `train.log` and a `retention` event. It never touches:
//! - a run whose worker declared in its `run_started` event that it prunes its own
//!   (`"retention": "worker"`, as `lavender-worker` does);
//! - a checkpoint being written (listing sees complete checkpoints only; temporary
//!   `.tmp-*` entries are cleared only after the retention grace of an hour);
//! - another run (only the pipeline's current run directory is pruned);
//! - anything outside `<data_root>/checkpoints/` (a run directory elsewhere is left alone).
//!
//! Hook: [`spawn`] once with the pipeline's record channel; [`RetentionHandle::set`]
//! on a config reload.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lavender::checkpoint::{RetentionPolicy, enforce_retention_with};
use lavender::config::{Config, Retention};
use lavender::events::{self, Event, kind};
use tokio::sync::watch;

use super::PipelineRecord;
use crate::layout::Layout;

/// What the follower needs from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionSettings {
    pub mode: Retention,
    /// `training.keep_checkpoints`.
    pub keep: usize,
    /// How often the event log is read (`supervisor.poll_interval_ms`).
    pub interval: Duration,
}

impl RetentionSettings {
    pub fn from_config(config: &Config) -> RetentionSettings {
        RetentionSettings {
            mode: config.supervisor.retention,
            keep: config.training.keep_checkpoints as usize,
            interval: Duration::from_millis(config.supervisor.poll_interval_ms.max(10)),
        }
    }
}

/// Follows one run's event log at a byte offset.
#[derive(Debug, Default)]
pub struct Follower {
    run_dir: Option<PathBuf>,
    offset: u64,
    worker_prunes: bool,
    warned_outside: bool,
}

/// What one poll did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pass {
    /// Checkpoint directories deleted.
    pub dropped: Vec<PathBuf>,
}

impl Follower {
    /// Reads the events appended to `<run_dir>/events.jsonl` since the last poll
    /// and, when a checkpoint was saved and the daemon is the one to prune, runs one
    /// retention pass. A new run directory starts from its first event.
    pub fn poll(
        &mut self,
        run_dir: &Path,
        checkpoints_root: &Path,
        settings: &RetentionSettings,
    ) -> lavender::Result<Option<Pass>> {
        if self.run_dir.as_deref() != Some(run_dir) {
            *self = Follower {
                run_dir: Some(run_dir.to_path_buf()),
                ..Follower::default()
            };
        }
        let batch = match events::read_from(&events::path(run_dir), self.offset) {
            Ok(batch) => batch,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        self.offset = batch.next_offset;
        let mut saved = false;
        for event in &batch.events {
            if event.kind == kind::RUN_STARTED {
                // Each (re)start of the worker says again what it does.
                self.worker_prunes = events::declares_own_retention(event);
            }
            saved |= event.kind == kind::CHECKPOINT_SAVED || event.kind == kind::FINAL_SAVED;
        }
        if !saved || settings.mode == Retention::Worker || self.worker_prunes {
            return Ok(None);
        }
        if !inside(run_dir, checkpoints_root) {
            if !self.warned_outside {
                self.warned_outside = true;
                tracing::warn!(
                    run_dir = %run_dir.display(),
                    "retention: the run directory is not inside {}; its checkpoints are left alone",
                    checkpoints_root.display()
                );
            }
            return Ok(None);
        }
        let dropped = enforce_retention_with(run_dir, &RetentionPolicy::keep(settings.keep))?;
        if !dropped.is_empty() {
            lavender::trainlog::log_retain(run_dir, dropped.len())?;
            let names: Vec<String> = dropped
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            tracing::info!(
                run_dir = %run_dir.display(),
                "RETAIN dropped {} old ckpt(s): {}",
                names.len(),
                names.join(", ")
            );
            events::append(
                run_dir,
                &Event::new(
                    kind::RETENTION,
                    format!("retention dropped {} old checkpoint(s)", names.len()),
                )
                .with("dropped", names)
                .with("by", "lavenderd"),
            )?;
        }
        Ok(Some(Pass { dropped }))
    }
}

/// `dir` is a directory strictly below `root` (both resolved through symlinks).
fn inside(dir: &Path, root: &Path) -> bool {
    match (std::fs::canonicalize(dir), std::fs::canonicalize(root)) {
        (Ok(dir), Ok(root)) => dir != root && dir.starts_with(&root),
        _ => false,
    }
}

/// Changes the settings of a running follower (config reload).
#[derive(Clone)]
pub struct RetentionHandle {
    settings: Arc<Mutex<RetentionSettings>>,
}

impl RetentionHandle {
    pub fn set(&self, settings: RetentionSettings) {
        if let Ok(mut s) = self.settings.lock() {
            *s = settings;
        }
    }
}

/// Starts the follower on its own thread (file deletions never block the async
/// runtime). It follows the pipeline's current run and ends with the pipeline actor.
pub fn spawn(
    layout: Layout,
    mut records: watch::Receiver<PipelineRecord>,
    settings: RetentionSettings,
) -> RetentionHandle {
    let shared = Arc::new(Mutex::new(settings));
    let handle = RetentionHandle {
        settings: shared.clone(),
    };
    let root = layout.checkpoints_root();
    let spawned = std::thread::Builder::new()
        .name("retention".into())
        .spawn(move || {
            let mut follower = Follower::default();
            loop {
                if records.has_changed().is_err() {
                    return; // the pipeline actor is gone: the daemon is shutting down
                }
                let run_dir = records.borrow_and_update().run_dir.clone();
                let settings = match shared.lock() {
                    Ok(s) => s.clone(),
                    Err(_) => return,
                };
                if let Some(run_dir) = run_dir
                    && let Err(e) = follower.poll(&run_dir, &root, &settings)
                {
                    tracing::warn!("retention: {e}");
                }
                std::thread::sleep(settings.interval);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("retention: could not start its thread ({e}); checkpoints are not pruned");
    }
    handle
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::checkpoint::CheckpointBuilder;
    use lavender::checkpoint::{CheckpointName, list_run_checkpoints};
    use lavender::trainer_state::TrainerState;

    fn settings(keep: usize) -> RetentionSettings {
        RetentionSettings {
            mode: Retention::Daemon,
            keep,
            interval: Duration::from_millis(10),
        }
    }

    struct Run {
        _root: tempfile::TempDir,
        checkpoints: PathBuf,
        dir: PathBuf,
    }

    fn run() -> Run {
        let root = tempfile::tempdir().unwrap();
        let checkpoints = root.path().join("checkpoints");
        let dir = checkpoints.join("run-2026-04-24_16-08-45");
        std::fs::create_dir_all(&dir).unwrap();
        Run {
            _root: root,
            checkpoints,
            dir,
        }
    }

    /// A complete checkpoint and its `checkpoint_saved` event, `counter` seconds apart.
    fn save(dir: &Path, counter: u32, val_loss: Option<f64>) -> PathBuf {
        let name = CheckpointName::new(
            "train",
            chrono::NaiveTime::from_hms_opt(12, 0, counter).unwrap(),
            counter,
        )
        .unwrap();
        let b = CheckpointBuilder::begin(dir, &name).unwrap();
        std::fs::write(b.dir().join("model.pt"), b"w").unwrap();
        let mut st = TrainerState::new("train", counter as u64);
        st.val_loss = val_loss;
        let path = b.commit(&st).unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + counter as u64);
        std::fs::File::options()
            .write(true)
            .open(path.join("trainer_state.json"))
            .unwrap()
            .set_modified(t)
            .unwrap();
        events::append(
            dir,
            &Event::new(kind::CHECKPOINT_SAVED, "saved").with("path", path.display().to_string()),
        )
        .unwrap();
        path
    }

    fn names(dir: &Path) -> Vec<String> {
        list_run_checkpoints(dir)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn keeps_keep_newest_and_best_and_logs_the_retain_line() {
        let r = run();
        events::append(&r.dir, &Event::new(kind::RUN_STARTED, "go")).unwrap();
        let mut f = Follower::default();
        save(&r.dir, 1, Some(3.0));
        save(&r.dir, 2, Some(0.5));
        for c in 3..=6 {
            save(&r.dir, c, Some(4.0));
        }
        let pass = f
            .poll(&r.dir, &r.checkpoints, &settings(2))
            .unwrap()
            .unwrap();
        assert_eq!(pass.dropped.len(), 3);
        assert_eq!(
            names(&r.dir),
            [
                "train-12-00-02-0002",
                "train-12-00-05-0005",
                "train-12-00-06-0006"
            ]
        );
        let log = std::fs::read_to_string(r.dir.join("train.log")).unwrap();
        assert_eq!(log.trim(), "RETAIN dropped 3 old ckpt(s)");
        // Nothing new: nothing to do, and the retention event it wrote is no save.
        assert_eq!(f.poll(&r.dir, &r.checkpoints, &settings(2)).unwrap(), None);
    }

    #[test]
    fn a_worker_that_prunes_its_own_or_mode_worker_is_left_alone() {
        let r = run();
        events::append(
            &r.dir,
            &Event::new(kind::RUN_STARTED, "go")
                .with(events::RETENTION_FIELD, events::RETENTION_BY_WORKER),
        )
        .unwrap();
        for c in 1..=5 {
            save(&r.dir, c, None);
        }
        let mut f = Follower::default();
        assert_eq!(f.poll(&r.dir, &r.checkpoints, &settings(1)).unwrap(), None);
        assert_eq!(names(&r.dir).len(), 5);

        // A restart by a worker that does not declare it: the daemon prunes again.
        events::append(&r.dir, &Event::new(kind::RUN_STARTED, "again")).unwrap();
        save(&r.dir, 6, None);
        let mode_worker = RetentionSettings {
            mode: Retention::Worker,
            ..settings(1)
        };
        assert_eq!(f.poll(&r.dir, &r.checkpoints, &mode_worker).unwrap(), None);
        assert_eq!(names(&r.dir).len(), 6);
        save(&r.dir, 7, None);
        let pass = f
            .poll(&r.dir, &r.checkpoints, &settings(1))
            .unwrap()
            .unwrap();
        assert_eq!(pass.dropped.len(), 6);
        assert_eq!(names(&r.dir), ["train-12-00-07-0007"]);
    }

    #[test]
    fn a_save_in_flight_and_other_runs_are_never_touched() {
        let r = run();
        let other = r.checkpoints.join("run-2026-04-24_10-00-00");
        std::fs::create_dir_all(&other).unwrap();
        for c in 1..=3 {
            save(&other, c, None);
        }
        for c in 1..=3 {
            save(&r.dir, c, None);
        }
        let name: CheckpointName = "train-12-00-09-0009".parse().unwrap();
        let inflight = CheckpointBuilder::begin(&r.dir, &name).unwrap();
        std::fs::write(inflight.dir().join("model.pt"), b"half").unwrap();
        let pass = Follower::default()
            .poll(&r.dir, &r.checkpoints, &settings(1))
            .unwrap()
            .unwrap();
        assert_eq!(pass.dropped.len(), 2);
        assert!(inflight.dir().exists(), "the save in flight survives");
        assert_eq!(names(&other).len(), 3, "another run is not touched");
    }

    #[test]
    fn a_run_directory_outside_checkpoints_is_left_alone() {
        let r = run();
        let outside = r.checkpoints.parent().unwrap().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        for c in 1..=4 {
            save(&outside, c, None);
        }
        assert_eq!(
            Follower::default()
                .poll(&outside, &r.checkpoints, &settings(1))
                .unwrap(),
            None
        );
        assert_eq!(names(&outside).len(), 4);
        // The checkpoints root itself is not a run either.
        for c in 1..=3 {
            save(&r.checkpoints, c, None);
        }
        assert_eq!(
            Follower::default()
                .poll(&r.checkpoints, &r.checkpoints, &settings(1))
                .unwrap(),
            None
        );
    }
}
