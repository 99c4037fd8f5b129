//! Retention, the duty after the read-back (`supervisor.retention: daemon`): the
//! lifecycle task hands [`Retention::due`] each batch of the run's events; after a
//! `checkpoint_saved` or `final_saved` the plan is to apply the run's
//! `training.keep_checkpoints` + newest + best-by-validation-loss rules with
//! [`lavender::checkpoint::enforce_retention_with`] (the same code `lavender-worker`
//! runs; in a run the daemon reads back, nothing older than the newest checkpoint
//! found intact goes before it), and the lifecycle runs it once every new checkpoint
//! has its verdict, logging `RETAIN dropped N old ckpt(s)` in the daemon's log. It
//! writes nothing into the run: `events.jsonl` and `train.log` are the worker's.
//! It never touches:
//! - a run whose worker declared in its `run_started` event that it prunes its own
//!   (`"retention": "worker"`, as `lavender-worker` does: its own pruning follows the
//!   same rule, and knows a verifier watches from the run's `.verdicts-watched`);
//! - a checkpoint being written (listing sees complete checkpoints only; temporary
//!   `.tmp-*` entries are cleared only after the retention grace of an hour);
//! - another run (only the run the lifecycle follows, the pipeline's current one);
//! - anything outside `<data_root>/checkpoints/` (a run directory elsewhere is left alone);
//! - anything in observe mode (the plan says what it would have done).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lavender::checkpoint::{RetentionPolicy, enforce_retention_with};
use lavender::config::{Config, Retention as RetentionMode};
use lavender::events::{self, Event, kind};

/// Decides from a run's events, as the lifecycle reads them, what retention does
/// at the next pass.
pub struct Retention {
    /// The config in force: `supervisor.retention`, `training.keep_checkpoints`.
    config: Arc<Mutex<Config>>,
    checkpoints_root: PathBuf,
    run_dir: Option<PathBuf>,
    worker_prunes: bool,
    warned_outside: bool,
}

/// Changes the config of a running [`Retention`] (config reload).
#[derive(Clone)]
pub struct RetentionHandle {
    config: Arc<Mutex<Config>>,
}

impl RetentionHandle {
    pub fn set(&self, config: &Config) {
        if let Ok(mut c) = self.config.lock() {
            c.clone_from(config);
        }
    }
}

/// One retention pass over a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass {
    pub run_dir: PathBuf,
    pub keep: usize,
}

/// What retention does at a pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Delete what the rules drop.
    Prune(Pass),
    /// Observe mode: the daemon would have pruned; it says so and deletes nothing.
    WouldPrune(Pass),
    /// Nothing: no save, or the daemon is not the one to prune.
    Nothing,
}

impl Plan {
    /// The pass to run, when the plan deletes.
    #[cfg(test)]
    pub fn prune(self) -> Option<Pass> {
        match self {
            Plan::Prune(pass) => Some(pass),
            _ => None,
        }
    }

    /// A later plan over the same run replaces an earlier one, except by nothing.
    pub fn or(self, earlier: Plan) -> Plan {
        match self {
            Plan::Nothing => earlier,
            later => later,
        }
    }
}

impl Retention {
    pub fn new(config: &Config, checkpoints_root: PathBuf) -> (Retention, RetentionHandle) {
        let config = Arc::new(Mutex::new(config.clone()));
        let handle = RetentionHandle {
            config: config.clone(),
        };
        let retention = Retention {
            config,
            checkpoints_root,
            run_dir: None,
            worker_prunes: false,
            warned_outside: false,
        };
        (retention, handle)
    }

    /// `events`, the next ones of `run_dir`'s event log: a pass is due when one
    /// says a checkpoint was saved and the daemon is the one to prune. A new run
    /// directory starts afresh (its events from the first on).
    pub fn due(&mut self, run_dir: &Path, events: &[Event]) -> Plan {
        if self.run_dir.as_deref() != Some(run_dir) {
            self.run_dir = Some(run_dir.to_path_buf());
            self.worker_prunes = false;
            self.warned_outside = false;
        }
        let mut saved = false;
        for event in events {
            if event.kind == kind::RUN_STARTED {
                // Each (re)start of the worker says again what it does.
                self.worker_prunes = events::declares_own_retention(event);
            }
            saved |= event.kind == kind::CHECKPOINT_SAVED || event.kind == kind::FINAL_SAVED;
        }
        let Ok((mode, keep, observe)) = self.config.lock().map(|config| {
            (
                config.supervisor.retention,
                config.training.keep_checkpoints as usize,
                config.supervisor.mode == lavender::config::SupervisorMode::Observe,
            )
        }) else {
            return Plan::Nothing;
        };
        if !saved || mode == RetentionMode::Worker || self.worker_prunes {
            return Plan::Nothing;
        }
        let pass = Pass {
            run_dir: run_dir.to_path_buf(),
            keep,
        };
        if observe {
            // Observe mode deletes nothing; the owner of the run prunes it.
            return Plan::WouldPrune(pass);
        }
        if !inside(run_dir, &self.checkpoints_root) {
            if !self.warned_outside {
                self.warned_outside = true;
                tracing::warn!(
                    run_dir = %run_dir.display(),
                    "retention: the run directory is not inside {}; its checkpoints are left alone",
                    self.checkpoints_root.display()
                );
            }
            return Plan::Nothing;
        }
        Plan::Prune(pass)
    }
}

impl Pass {
    /// Says in the daemon's log what the pass would have deleted (observe mode).
    pub fn would_have(&self) {
        tracing::info!(
            run_dir = %self.run_dir.display(),
            "observe mode (supervisor.mode: observe): would have enforced training.keep_checkpoints {}; nothing deleted",
            self.keep
        );
    }

    /// Deletes what the rules drop (blocking: run it off the async workers) and
    /// says so in the daemon's log; returns the checkpoint directories deleted.
    pub fn run(&self) -> lavender::Result<Vec<PathBuf>> {
        let dropped = enforce_retention_with(&self.run_dir, &RetentionPolicy::keep(self.keep))?;
        if !dropped.is_empty() {
            let names: Vec<String> = dropped
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            tracing::info!(
                run_dir = %self.run_dir.display(),
                "RETAIN dropped {} old ckpt(s): {}",
                names.len(),
                names.join(", ")
            );
        }
        Ok(dropped)
    }
}

/// Early retention, for the disk foresight (`pipeline/save_room.rs`, when the next save
/// will not fit): what that save's own retention would drop, dropped now. The same
/// rule with one fewer kept (`keep − 1`, and always the newest, the best and nothing
/// older than the newest checkpoint found intact). Blocking; the caller keeps it out
/// of observe mode and inside the checkpoints root ([`inside`]).
pub fn early(run_dir: &Path, keep: usize) -> lavender::Result<Vec<PathBuf>> {
    enforce_retention_with(run_dir, &RetentionPolicy::keep(keep.saturating_sub(1)))
}

/// `dir` is a directory strictly below `root` (both resolved through symlinks).
pub fn inside(dir: &Path, root: &Path) -> bool {
    match (std::fs::canonicalize(dir), std::fs::canonicalize(root)) {
        (Ok(dir), Ok(root)) => dir != root && dir.starts_with(&root),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::checkpoint::CheckpointBuilder;
    use lavender::checkpoint::{CheckpointName, list_run_checkpoints};

    /// A config with `retention: mode` and `keep_checkpoints: keep`.
    fn config(mode: RetentionMode, keep: u32) -> Config {
        let mut config = Config::default();
        config.supervisor.retention = mode;
        config.training.keep_checkpoints = keep;
        config
    }

    /// The follower's part: a run's new events handed to [`Retention::due`], and the
    /// pass it makes due run here; the directories it deleted.
    struct Follow {
        retention: Retention,
        handle: RetentionHandle,
        offset: u64,
    }

    impl Follow {
        fn new(checkpoints: &Path, config: Config) -> Follow {
            let (retention, handle) = Retention::new(&config, checkpoints.to_path_buf());
            Follow {
                retention,
                handle,
                offset: 0,
            }
        }

        fn poll(&mut self, run_dir: &Path) -> Option<Vec<PathBuf>> {
            let batch = events::read_from(&events::path(run_dir), self.offset).unwrap();
            self.offset = batch.next_offset;
            let pass = self.retention.due(run_dir, &batch.events).prune()?;
            Some(pass.run().unwrap())
        }
    }

    use crate::checkpoints::fixture::run;

    /// A complete checkpoint and its `checkpoint_saved` event, `counter` seconds apart.
    fn save(dir: &Path, counter: u32, val_loss: Option<f64>) -> PathBuf {
        crate::checkpoints::fixture::save(dir, "train", counter, val_loss, false)
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
        let mut f = Follow::new(&r.checkpoints, config(RetentionMode::Daemon, 2));
        save(&r.dir, 1, Some(3.0));
        save(&r.dir, 2, Some(0.5));
        for c in 3..=6 {
            save(&r.dir, c, Some(4.0));
        }
        let events_before = std::fs::read(events::path(&r.dir)).unwrap();
        assert_eq!(f.poll(&r.dir).unwrap().len(), 3);
        assert_eq!(
            names(&r.dir),
            [
                "train-12-00-02-0002",
                "train-12-00-05-0005",
                "train-12-00-06-0006"
            ]
        );
        // Nothing is written into the run: its logs are the worker's.
        assert_eq!(std::fs::read(events::path(&r.dir)).unwrap(), events_before);
        assert!(!r.dir.join("train.log").exists());
        // Nothing new: nothing to do.
        assert_eq!(f.poll(&r.dir), None);
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
        let mut f = Follow::new(&r.checkpoints, config(RetentionMode::Daemon, 1));
        assert_eq!(f.poll(&r.dir), None);
        assert_eq!(names(&r.dir).len(), 5);

        // A restart by a worker that does not declare it: the daemon prunes again.
        events::append(&r.dir, &Event::new(kind::RUN_STARTED, "again")).unwrap();
        save(&r.dir, 6, None);
        f.handle.set(&config(RetentionMode::Worker, 1));
        assert_eq!(f.poll(&r.dir), None);
        assert_eq!(names(&r.dir).len(), 6);
        f.handle.set(&config(RetentionMode::Daemon, 1));
        save(&r.dir, 7, None);
        assert_eq!(f.poll(&r.dir).unwrap().len(), 6);
        assert_eq!(names(&r.dir), ["train-12-00-07-0007"]);
    }

    /// `supervisor.mode: observe` deletes no checkpoint; back to `act`, it prunes.
    #[test]
    fn observe_mode_deletes_nothing() {
        let r = run();
        for c in 1..=4 {
            save(&r.dir, c, None);
        }
        let mut observe = config(RetentionMode::Daemon, 1);
        observe.supervisor.mode = lavender::config::SupervisorMode::Observe;
        let mut f = Follow::new(&r.checkpoints, observe);
        assert_eq!(f.poll(&r.dir), None);
        assert_eq!(names(&r.dir).len(), 4);
        f.handle.set(&config(RetentionMode::Daemon, 1));
        save(&r.dir, 5, None);
        assert_eq!(f.poll(&r.dir).unwrap().len(), 4);
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
        let dropped = Follow::new(&r.checkpoints, config(RetentionMode::Daemon, 1))
            .poll(&r.dir)
            .unwrap();
        assert_eq!(dropped.len(), 2);
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
            Follow::new(&r.checkpoints, config(RetentionMode::Daemon, 1)).poll(&outside),
            None
        );
        assert_eq!(names(&outside).len(), 4);
        // The checkpoints root itself is not a run either.
        for c in 1..=3 {
            save(&r.checkpoints, c, None);
        }
        assert_eq!(
            Follow::new(&r.checkpoints, config(RetentionMode::Daemon, 1)).poll(&r.checkpoints),
            None
        );
    }
}
