//! A divergence rolled back (`supervisor.on_diverged: rollback`): which checkpoint
//! the run goes back to, which of its checkpoints were saved after the divergence
//! began, and the data the restarted worker skips (`lavender::skips`).
//!
//! The target is the run's newest complete checkpoint saved before the divergence
//! began (`failure.since_step`), else the checkpoint the pipeline started from, else
//! the start of training. The run's checkpoints of `since_step` or later are set
//! aside: renamed to `.diverged-<name>` in the run directory, hidden, so no listing,
//! `latest`, resume, retention or export ever sees them again (they stay for
//! inspection and go with their run). The restart then resumes from the run's
//! newest complete checkpoint, which is the target, as a crash restart does. The
//! range appended to `<run>/skipped.json` is (target step, detection step].
//! [`plan`] decides from the run's files; [`apply`] renames and appends.

use std::path::{Path, PathBuf};

use lavender::checkpoint::{self, Checkpoint};
use lavender::config::SupervisorConfig;
use lavender::failure::Failure;
use lavender::skips::{self, SkipRange, Skips};

/// What a rollback does.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollback {
    /// The checkpoint the worker resumes from; `None`: training starts afresh.
    pub target: Option<PathBuf>,
    /// The run's checkpoints saved after the divergence began, to set aside.
    pub set_aside: Vec<PathBuf>,
    /// The data the worker skips, appended to `<run>/skipped.json`.
    pub range: SkipRange,
    /// Rollbacks of this run within the window (see [`plan`]), this one included.
    pub number: usize,
}

/// Why a divergence is not rolled back: the pipeline fails with this.
#[derive(Debug, Clone, PartialEq)]
pub struct NoRollback(pub String);

/// The step a worker resuming from `ck` starts at, in a run of chunk `chunk`: its
/// own step, or 0 when it seeds a new chunk (`lavender-worker` starts the chunk's
/// steps afresh).
fn resume_step(ck: &Checkpoint, chunk: u32) -> u64 {
    let st = &ck.state;
    let ck_chunk = st
        .extra
        .get("chunk")
        .or_else(|| st.data_cursor.get("chunk"))
        .and_then(serde_json::Value::as_u64);
    match ck_chunk {
        Some(c) if c != u64::from(chunk) => 0,
        _ => st.step,
    }
}

/// Plans the rollback of the run in `run_dir` (chunk `chunk`, started from
/// `started_from`) after `failure`, detected at `detected` (the failure's `step`, or
/// the worker's last reported step), at time `at` (RFC 3339). `sup.max_rollbacks`
/// counts the ranges already in the run's record that were detected less than
/// `sup.rollback_window_steps` steps before `detected` (a divergence replayed after a
/// rollback is detected before the range's end, and counts too): spikes far apart
/// each get their rollback, a spike that keeps coming back fails.
pub fn plan(
    run_dir: &Path,
    chunk: u32,
    started_from: Option<&Path>,
    failure: &Failure,
    detected: u64,
    sup: &SupervisorConfig,
    at: &str,
) -> Result<Rollback, NoRollback> {
    let read = |e: lavender::Error| NoRollback(format!("cannot roll back: {e}"));
    let done = skips::read(run_dir).map_err(read)?;
    let recent = done
        .ranges
        .iter()
        .filter(|r| detected < r.to_step.saturating_add(sup.rollback_window_steps))
        .count();
    if recent >= sup.max_rollbacks as usize {
        return Err(NoRollback(format!(
            "{}; gave up after {recent} rollback(s) (supervisor.max_rollbacks) within {} steps (supervisor.rollback_window_steps){}",
            failure.message,
            sup.rollback_window_steps,
            last_ranges(&done)
        )));
    }
    let since = failure.since_step.unwrap_or(detected).min(detected);
    let (before, after): (Vec<Checkpoint>, Vec<Checkpoint>) =
        checkpoint::list_run_checkpoints(run_dir)
            .map_err(read)?
            .into_iter()
            .partition(|c| c.state.step < since);
    let target = match before.into_iter().last() {
        Some(ck) => Some(ck),
        None => match started_from {
            Some(path) => Some(Checkpoint::load(path).map_err(|e| {
                NoRollback(format!(
                    "cannot roll back to the checkpoint the pipeline started from: {e}"
                ))
            })?),
            None => None,
        },
    };
    let from_step = target.as_ref().map_or(0, |ck| resume_step(ck, chunk));
    if from_step >= detected {
        return Err(NoRollback(format!(
            "{}; no checkpoint was saved before step {since}, where it began, so there is nothing to roll back to",
            failure.message
        )));
    }
    Ok(Rollback {
        range: SkipRange {
            from_step,
            to_step: detected,
            checkpoint: target.as_ref().map(|c| c.name.clone()).unwrap_or_default(),
            reason: failure.message.clone(),
            at: at.to_string(),
        },
        target: target.map(|c| c.path),
        set_aside: after.into_iter().map(|c| c.path).collect(),
        number: recent + 1,
    })
}

/// ", the last from step 120 to 140" for a failure message.
fn last_ranges(skips: &Skips) -> String {
    skips
        .ranges
        .last()
        .map(|r| {
            format!(
                "; the last went back to step {} and skipped to step {}",
                r.from_step, r.to_step
            )
        })
        .unwrap_or_default()
}

/// The hidden name a set-aside checkpoint gets in its run directory.
pub fn set_aside_path(ck: &Path) -> PathBuf {
    let name = ck
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ck.with_file_name(format!("{}{name}", skips::SET_ASIDE_PREFIX))
}

/// Sets the diverged checkpoints aside, then records the range: a crash between
/// the two leaves a record without the range, which the next divergence repeats.
pub fn apply(run_dir: &Path, rollback: &Rollback) -> lavender::Result<()> {
    for ck in &rollback.set_aside {
        let to = set_aside_path(ck);
        std::fs::rename(ck, &to).map_err(|e| lavender::Error::io("set aside", ck, e))?;
    }
    lavender::atomic::sync_dir(run_dir)?;
    skips::append(run_dir, rollback.range.clone())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use lavender::failure::FailureKind;
    use lavender::trainer_state::{self, TrainerState};

    use super::*;

    fn save(run: &Path, name: &str, step: u64, chunk: u64) -> PathBuf {
        let dir = run.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut st = TrainerState::new("pretrain", step);
        st.extra.insert("chunk".into(), serde_json::json!(chunk));
        trainer_state::write(&dir, &st).unwrap();
        // Completion order is by mtime: one save after the other.
        std::thread::sleep(std::time::Duration::from_millis(20));
        dir
    }

    fn diverged(step: u64, since: u64) -> Failure {
        let mut f = Failure::new(FailureKind::Diverged, "loss spiked");
        f.step = Some(step);
        f.since_step = Some(since);
        f
    }

    const AT: &str = "2026-01-01T00:00:00Z";

    /// The `supervisor:` section with `max_rollbacks` and `rollback_window_steps`.
    fn limits(max_rollbacks: u32, rollback_window_steps: u64) -> SupervisorConfig {
        SupervisorConfig {
            max_rollbacks,
            rollback_window_steps,
            ..lavender::config::Config::default().supervisor
        }
    }

    #[test]
    fn back_to_the_newest_checkpoint_before_the_spike_setting_aside_the_later_ones() {
        let sup = &limits(2, 1000);
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        save(run, "pretrain-00-00-01-0001", 50, 1);
        let c60 = save(run, "pretrain-00-00-02-0002", 60, 1);
        let c70 = save(run, "pretrain-00-00-03-0003", 70, 1);
        let rb = plan(run, 1, None, &diverged(74, 70), 74, sup, AT).unwrap();
        assert_eq!(rb.target.as_deref(), Some(c60.as_path()));
        assert_eq!(rb.set_aside, std::slice::from_ref(&c70));
        assert_eq!(
            (rb.range.from_step, rb.range.to_step, rb.number),
            (60, 74, 1)
        );
        assert_eq!(rb.range.checkpoint, "pretrain-00-00-02-0002");
        apply(run, &rb).unwrap();
        assert!(!c70.exists() && set_aside_path(&c70).is_dir());
        // The newest complete checkpoint, where a restart resumes, is the target.
        let latest = checkpoint::latest_complete(run).unwrap().unwrap();
        assert_eq!(latest.path, c60);
        assert_eq!(
            skips::read(run).unwrap().ranges,
            std::slice::from_ref(&rb.range)
        );

        // Diverging again before any new save: the same checkpoint, a second range.
        let rb = plan(run, 1, None, &diverged(63, 61), 63, sup, AT).unwrap();
        assert_eq!((rb.target.as_deref(), rb.number), (Some(c60.as_path()), 2));
        apply(run, &rb).unwrap();
        // A third time: max_rollbacks (2) is reached; the failure names it.
        let no = plan(run, 1, None, &diverged(62, 61), 62, sup, AT).unwrap_err();
        assert!(
            no.0.contains("loss spiked")
                && no
                    .0
                    .contains("gave up after 2 rollback(s) (supervisor.max_rollbacks)"),
            "{}",
            no.0
        );
    }

    #[test]
    fn without_an_earlier_checkpoint_of_the_run_back_to_where_the_pipeline_started() {
        let sup = &limits(2, 1000);
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run-b");
        let c5 = save(&run, "pretrain-00-00-01-0001", 5, 2);
        // Started afresh: back to step 0, the run's checkpoint set aside.
        let rb = plan(&run, 2, None, &diverged(8, 4), 8, sup, AT).unwrap();
        assert_eq!((rb.target.clone(), rb.range.from_step), (None, 0));
        assert_eq!(rb.set_aside, [c5]);
        assert_eq!(rb.range.checkpoint, "");
        // Started from chunk 1's last checkpoint: back to it, this chunk's step 0.
        let prev = save(&dir.path().join("run-a"), "final-00-00-09-0009", 980, 1);
        let rb = plan(&run, 2, Some(&prev), &diverged(8, 4), 8, sup, AT).unwrap();
        assert_eq!(
            (rb.target.as_deref(), rb.range.from_step),
            (Some(prev.as_path()), 0)
        );
        // Started from a checkpoint of the same chunk (start --resume): its step.
        let same = save(&dir.path().join("run-c"), "pretrain-00-00-09-0010", 300, 2);
        let fresh = dir.path().join("run-d");
        let rb = plan(&fresh, 2, Some(&same), &diverged(308, 304), 308, sup, AT).unwrap();
        assert_eq!(rb.range.from_step, 300);
        // A divergence detected at the start checkpoint's step cannot be rolled back.
        let no = plan(&fresh, 2, Some(&same), &diverged(300, 290), 300, sup, AT).unwrap_err();
        assert!(no.0.contains("nothing to roll back to"), "{}", no.0);
    }

    /// Three spikes far apart (more than `rollback_window_steps`) each get their
    /// rollback with `max_rollbacks: 2`; three close together fail on the third.
    #[test]
    fn separate_spikes_each_roll_back_and_a_spike_that_keeps_coming_back_fails() {
        let limits = &limits(2, 100);
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        for (n, step) in [1000u64, 2000, 3000].into_iter().enumerate() {
            save(run, &format!("pretrain-00-00-0{n}-000{n}"), step - 20, 1);
            let rb = plan(run, 1, None, &diverged(step, step - 5), step, limits, AT).unwrap();
            assert_eq!(
                rb.number, 1,
                "a spike far from the last is the first of its window"
            );
            apply(run, &rb).unwrap();
        }
        // The same spike coming back: 3000 was rolled back; 3010 and 3020 count with it.
        save(run, "pretrain-00-00-05-0005", 3005, 1);
        let rb = plan(run, 1, None, &diverged(3010, 3008), 3010, limits, AT).unwrap();
        assert_eq!(rb.number, 2);
        apply(run, &rb).unwrap();
        let no = plan(run, 1, None, &diverged(3020, 3008), 3020, limits, AT).unwrap_err();
        assert!(
            no.0.contains(
                "gave up after 2 rollback(s) (supervisor.max_rollbacks) within 100 steps"
            ),
            "{}",
            no.0
        );
    }
}
