//! Finding checkpoints. Only complete ones count: a directory whose
//! `trainer_state.json` exists and parses. Hidden temporary directories and
//! incomplete directories are never listed, never "latest".

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::CheckpointName;
use crate::error::{Error, IoContext, Result};
use crate::run;
use crate::trainer_state::{self, TrainerState};
use crate::trainlog;

/// Inside each export (`lavender_export`): where it came from, and lavender's own
/// trainer state. A directory holding it is a copy in Hugging Face's layout, not a
/// save of the training, so listing skips it.
pub const EXPORT_MARKER: &str = "lavender_export.json";

#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub path: PathBuf,
    pub name: String,
    /// `None` for checkpoints of an older or foreign naming scheme.
    pub parsed: Option<CheckpointName>,
    /// When it became complete: the mtime of its `trainer_state.json`.
    pub mtime: SystemTime,
    pub state: TrainerState,
}

impl Checkpoint {
    /// Load the checkpoint at `dir` if it is complete.
    pub fn load(dir: &Path) -> Result<Checkpoint> {
        let state = trainer_state::read(dir)?;
        let marker = dir.join(trainer_state::FILE);
        let mtime = fs::metadata(&marker)
            .and_then(|m| m.modified())
            .ctx("stat", &marker)?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Checkpoint {
            parsed: name.parse().ok(),
            name,
            path: dir.to_path_buf(),
            mtime,
            state,
        })
    }

    /// Ordering key: completion time, ties broken by the counter, then the name.
    fn order_key(&self) -> (SystemTime, u32, &str) {
        (
            self.mtime,
            self.parsed.as_ref().map_or(0, |p| p.counter),
            &self.name,
        )
    }
}

/// The rule for every reader: the checkpoint at `dir` is complete when its
/// `trainer_state.json` (written last) exists and parses. A marker cut short by a
/// crash, or another trainer's file of that name, does not count.
pub fn is_complete(dir: &Path) -> bool {
    trainer_state::read(dir).is_ok()
}

fn is_hidden(name: &str) -> bool {
    name.starts_with('.')
}

/// Complete checkpoints directly inside `dir`, oldest first.
pub fn list_run_checkpoints(dir: &Path) -> Result<Vec<Checkpoint>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.ctx("list", dir)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_hidden(&name) || !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        // An export written into the run is a copy in Hugging Face's layout, not a save
        // of the training: never listed, resumed from or retained.
        if entry.path().join(EXPORT_MARKER).is_file() {
            continue;
        }
        // Incomplete, vanished (retention racing us) or unreadable: not a checkpoint.
        if let Ok(ckpt) = Checkpoint::load(&entry.path()) {
            out.push(ckpt);
        }
    }
    out.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
    Ok(out)
}

/// Every complete checkpoint under the checkpoints root: those nested in run
/// directories plus flat ones directly in the root (the older layout), oldest first.
pub fn list_checkpoints(checkpoints_root: &Path) -> Result<Vec<Checkpoint>> {
    let mut all = list_run_checkpoints(checkpoints_root)?;
    for run in run::list_runs(checkpoints_root)? {
        all.extend(list_run_checkpoints(&run.path)?);
    }
    all.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
    Ok(all)
}

/// The newest complete checkpoint of a run.
pub fn latest_complete(run_dir: &Path) -> Result<Option<Checkpoint>> {
    Ok(list_run_checkpoints(run_dir)?.pop())
}

/// The newest complete checkpoint of `run_dir` when it has one, else the newest of
/// every run under `checkpoints_root`; unreadable folders count as empty.
pub fn newest_complete(run_dir: Option<&Path>, checkpoints_root: &Path) -> Option<Checkpoint> {
    run_dir
        .and_then(|d| latest_complete(d).ok().flatten())
        .or_else(|| list_checkpoints(checkpoints_root).ok()?.pop())
}

/// The counter for the next save in `run_dir`: one past the highest ever used there,
/// counting complete, incomplete and in-flight checkpoints and the run's train.log,
/// so a resumed run never reuses a number even after retention deleted old ones.
pub fn next_counter(run_dir: &Path) -> Result<u32> {
    let mut max: Option<u32> = None;
    let mut see = |name: &str| {
        let name = name.strip_prefix(crate::atomic::TMP_PREFIX).unwrap_or(name);
        // Temporary names carry a `-<pid>-<n>` suffix after the checkpoint name.
        let candidate = name.split('-').take(5).collect::<Vec<_>>().join("-");
        if let Ok(n) = candidate.parse::<CheckpointName>() {
            max = Some(max.map_or(n.counter, |m| m.max(n.counter)));
        }
    };
    match fs::read_dir(run_dir) {
        Ok(entries) => {
            for entry in entries {
                see(&entry.ctx("list", run_dir)?.file_name().to_string_lossy());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("list", run_dir, e)),
    }
    for name in trainlog::saved_names(run_dir)? {
        see(&name);
    }
    Ok(max.map_or(1, |m| m + 1))
}

/// Resolve `--resume`: `latest` is the newest complete checkpoint across all runs;
/// a path is a checkpoint directory, a run directory meaning its newest checkpoint,
/// or a file inside a complete checkpoint (its `model.safetensors`, say) meaning
/// that checkpoint.
pub fn resolve_resume(spec: &str, checkpoints_root: &Path) -> Result<Checkpoint> {
    if spec == "latest" {
        return list_checkpoints(checkpoints_root)?
            .pop()
            .ok_or_else(|| Error::NotFound {
                what: "a complete checkpoint to resume from",
                path: checkpoints_root.to_path_buf(),
                hint: "start without --resume to train from step 0, or pass --resume PATH",
            });
    }
    let path = Path::new(spec);
    if path.is_file() {
        return match path.parent().filter(|dir| is_complete(dir)) {
            Some(dir) => Checkpoint::load(dir),
            None => Err(Error::NotFound {
                what: "a complete checkpoint holding the file",
                path: path.to_path_buf(),
                hint: "a file resumes only from inside a checkpoint (a directory with trainer_state.json); pass that checkpoint, a run directory, or `latest`",
            }),
        };
    }
    if !path.is_dir() {
        return Err(Error::NotFound {
            what: "checkpoint directory",
            path: path.to_path_buf(),
            hint: "pass a checkpoint directory, a run directory, or `latest`",
        });
    }
    if is_complete(path) {
        return Checkpoint::load(path);
    }
    latest_complete(path)?.ok_or_else(|| Error::NotFound {
        what: "a complete checkpoint (one with trainer_state.json)",
        path: path.to_path_buf(),
        hint: "the save may have been interrupted; pick an earlier checkpoint or `latest`",
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::checkpoint::CheckpointBuilder;
    use chrono::NaiveTime;
    use std::time::Duration;

    /// Save a complete checkpoint with a given counter and optional validation loss.
    pub(crate) fn save(run: &Path, stage: &str, counter: u32, val_loss: Option<f64>) -> PathBuf {
        let name = CheckpointName::new(
            stage,
            NaiveTime::from_hms_opt(12, 0, counter % 60).unwrap(),
            counter,
        )
        .unwrap();
        let b = CheckpointBuilder::begin(run, &name).unwrap();
        fs::write(b.dir().join("model.safetensors"), b"weights").unwrap();
        let mut st = TrainerState::new(stage, counter as u64 * 10);
        st.val_loss = val_loss;
        b.commit(&st).unwrap()
    }

    pub(crate) fn set_mtime(ckpt: &Path, secs_after_epoch: u64) {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs_after_epoch);
        let f = fs::File::options()
            .write(true)
            .open(ckpt.join(trainer_state::FILE))
            .unwrap();
        f.set_modified(t).unwrap();
    }

    #[test]
    fn incomplete_and_temporary_are_never_listed() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-04-24_16-08-45");
        fs::create_dir_all(&run).unwrap();
        let done = save(&run, "pretrain", 1, None);
        // Half-written: payload but no trainer_state.json.
        let half = run.join("pretrain-12-00-02-0002");
        fs::create_dir(&half).unwrap();
        fs::write(half.join("model.safetensors"), b"partial").unwrap();
        // In flight: a builder not yet committed.
        let name: CheckpointName = "pretrain-12-00-03-0003".parse().unwrap();
        let inflight = CheckpointBuilder::begin(&run, &name).unwrap();
        fs::write(
            inflight.dir().join(trainer_state::FILE),
            "{\"step\":1,\"stage\":\"x\"}",
        )
        .unwrap();
        // Truncated marker.
        let trunc = run.join("pretrain-12-00-04-0004");
        fs::create_dir(&trunc).unwrap();
        fs::write(trunc.join(trainer_state::FILE), "{\"step\": 4, \"st").unwrap();

        let listed = list_run_checkpoints(&run).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].path, done);
        assert_eq!(latest_complete(&run).unwrap().unwrap().path, done);
        assert_eq!(list_checkpoints(root.path()).unwrap().len(), 1);
        assert_eq!(resolve_resume("latest", root.path()).unwrap().path, done);
        assert!(resolve_resume(half.to_str().unwrap(), root.path()).is_err());
        // Counter continues past the in-flight and incomplete ones.
        assert_eq!(next_counter(&run).unwrap(), 5);
        drop(inflight);
    }

    #[test]
    fn a_hugging_face_checkpoint_counts_once_complete() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-04-24_16-08-45");
        fs::create_dir_all(&run).unwrap();
        let ours = save(&run, "train", 1, None);
        set_mtime(&ours, 1_000);
        let hf = run.join("checkpoint-20");
        fs::create_dir(&hf).unwrap();
        fs::write(hf.join("model.safetensors"), b"weights").unwrap();
        // The Trainer is still writing: no trainer_state.json yet.
        assert_eq!(list_run_checkpoints(&run).unwrap().len(), 1);
        fs::write(
            hf.join(trainer_state::FILE),
            r#"{"global_step": 20, "log_history": []}"#,
        )
        .unwrap();
        set_mtime(&hf, 2_000);
        let newest = latest_complete(&run).unwrap().unwrap();
        assert_eq!((newest.path, newest.state.step), (hf.clone(), 20));
        assert_eq!(newest.parsed, None);
        assert_eq!(
            resolve_resume(hf.to_str().unwrap(), root.path())
                .unwrap()
                .state
                .step,
            20
        );
        // A hidden staging directory of the Trainer is never a checkpoint.
        let staged = run.join(".tmp-hf-staging").join("checkpoint-30");
        fs::create_dir_all(&staged).unwrap();
        fs::write(staged.join(trainer_state::FILE), r#"{"global_step": 30}"#).unwrap();
        assert_eq!(list_checkpoints(root.path()).unwrap().len(), 2);
    }

    #[test]
    fn union_of_nested_and_flat() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-04-24_16-08-45");
        fs::create_dir_all(&run).unwrap();
        let nested = save(&run, "sft", 2, None);
        let flat = save(root.path(), "pretrain", 1, None);
        set_mtime(&flat, 1_000);
        set_mtime(&nested, 2_000);
        let all: Vec<_> = list_checkpoints(root.path())
            .unwrap()
            .into_iter()
            .map(|c| c.path)
            .collect();
        assert_eq!(all, [flat, nested.clone()]);
        assert_eq!(resolve_resume("latest", root.path()).unwrap().path, nested);
        assert_eq!(
            resolve_resume(run.to_str().unwrap(), root.path())
                .unwrap()
                .path,
            nested
        );
    }

    #[test]
    fn counter_continues_after_resume_even_when_retention_deleted() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-04-24_16-08-45");
        fs::create_dir_all(&run).unwrap();
        assert_eq!(next_counter(&run).unwrap(), 1);
        for c in 1..=3 {
            let p = save(&run, "pretrain", c, None);
            trainlog::log_save(
                &run,
                &p.file_name().unwrap().to_string_lossy(),
                crate::time::now_utc(),
            )
            .unwrap();
        }
        assert_eq!(next_counter(&run).unwrap(), 4);
        // Retention (or a user) removed every directory; the log still remembers.
        for c in list_run_checkpoints(&run).unwrap() {
            fs::remove_dir_all(c.path).unwrap();
        }
        assert_eq!(next_counter(&run).unwrap(), 4);
    }

    #[test]
    fn resume_errors_say_what_to_do() {
        let root = tempfile::tempdir().unwrap();
        let err = resolve_resume("latest", root.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("start without --resume"), "{err}");
        let err = resolve_resume("/no/such/ckpt", root.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("/no/such/ckpt"), "{err}");
    }

    #[test]
    fn a_file_inside_a_checkpoint_resumes_from_that_checkpoint_and_one_outside_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-01-01_00-00-00");
        let first = save(&run, "pretrain", 1, None);
        save(&run, "pretrain", 2, None);
        let weights = first.join("model.safetensors");
        let c = resolve_resume(weights.to_str().unwrap(), root.path()).unwrap();
        assert_eq!(
            c.path, first,
            "the file's own checkpoint, not the run's newest"
        );

        let stray = run.join("notes.txt");
        fs::write(&stray, "x").unwrap();
        let err = resolve_resume(stray.to_str().unwrap(), root.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("notes.txt"), "{err}");
        assert!(err.contains("trainer_state.json"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
