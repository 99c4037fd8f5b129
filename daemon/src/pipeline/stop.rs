//! What a stop saved. The worker saves on SIGTERM; which checkpoint that was is read
//! from its events since the stop began (final_saved / checkpoint_saved with a
//! path), then its final heartbeat, then the listing. Only complete checkpoints count.

use std::path::{Path, PathBuf};

use lavender::config::PipelineStep;
use lavender::events::{self, kind};
use lavender::heartbeat::{self, Heartbeat, WorkerState};
pub(crate) use lavender_api::StopReport;

/// Where the stop began, to tell a checkpoint saved by it from older ones.
#[derive(Debug, Clone)]
pub struct StopMark {
    pub run_dir: Option<PathBuf>,
    pub events_offset: u64,
    pub newest_before: Option<PathBuf>,
}

impl StopMark {
    pub fn take(run_dir: Option<&Path>, checkpoints_root: &Path) -> StopMark {
        let events_offset = run_dir
            .and_then(|d| std::fs::metadata(events::path(d)).ok())
            .map_or(0, |m| m.len());
        StopMark {
            run_dir: run_dir.map(Path::to_path_buf),
            events_offset,
            newest_before: newest_complete(run_dir, checkpoints_root),
        }
    }
}

/// Newest complete checkpoint of the run, else across all runs.
pub fn newest_complete(run_dir: Option<&Path>, checkpoints_root: &Path) -> Option<PathBuf> {
    lavender::checkpoint::newest_complete(run_dir, checkpoints_root).map(|c| c.path)
}

/// The checkpoint this stop saved, if one was: a `final_saved` event since the stop
/// began, else the final heartbeat (`stopping`) naming a new checkpoint. A worker
/// that exited by itself after SIGTERM may also have saved without saying so (no
/// events): then a checkpoint newer than the stop's start counts. A killed worker's
/// periodic saves do not: they were not made because of the stop.
/// `last` is the worker's final heartbeat.
fn saved_since(
    mark: &StopMark,
    checkpoints_root: &Path,
    killed: bool,
    last: Option<&Heartbeat>,
) -> Option<PathBuf> {
    let run_dir = mark.run_dir.as_deref()?;
    let is_new = |p: &PathBuf| {
        Some(p) != mark.newest_before.as_ref() && lavender::checkpoint::is_complete(p)
    };
    let since = events::read_from(&events::path(run_dir), mark.events_offset)
        .map(|b| b.events)
        .unwrap_or_default();
    let saved_event = |wanted: &str| {
        since
            .iter()
            .rev()
            .filter(|e| e.kind == wanted)
            .filter_map(|e| e.field("path")?.as_str().map(PathBuf::from))
            .map(|p| if p.is_relative() { run_dir.join(p) } else { p })
            .find(|p| is_new(p))
    };
    if let Some(p) = saved_event(kind::FINAL_SAVED) {
        return Some(p);
    }
    if let Some(hb) = last
        && hb.state == WorkerState::Stopping
        && let Some(name) = &hb.latest_checkpoint
        && is_new(&run_dir.join(name))
    {
        return Some(run_dir.join(name));
    }
    if killed {
        return None;
    }
    saved_event(kind::CHECKPOINT_SAVED)
        .or_else(|| newest_complete(Some(run_dir), checkpoints_root).filter(|p| is_new(p)))
}

/// The worker stopped right after a save: its final heartbeat (`stopping`) names
/// `checkpoint` and is at that checkpoint's step, so nothing was left to save.
fn holds_last_step(
    run_dir: &Path,
    checkpoint: &lavender::checkpoint::Checkpoint,
    hb: &Heartbeat,
) -> bool {
    let named = hb.latest_checkpoint.as_deref().map(|n| run_dir.join(n));
    hb.state == WorkerState::Stopping
        && named.as_deref() == Some(checkpoint.path.as_path())
        && checkpoint.state.step == hb.step
}

/// The stop reports the daemon makes: what it reads of the run's files to say what
/// a stop saved.
pub trait StopReports {
    fn nothing_running(checkpoints_root: &Path, run_dir: Option<&Path>) -> StopReport;
    fn during_launch(
        step: PipelineStep,
        checkpoints_root: &Path,
        run_dir: Option<&Path>,
    ) -> StopReport;
    fn after_exit(
        step: PipelineStep,
        mark: &StopMark,
        checkpoints_root: &Path,
        killed: bool,
    ) -> StopReport;
}

impl StopReports for StopReport {
    fn nothing_running(checkpoints_root: &Path, run_dir: Option<&Path>) -> StopReport {
        StopReport::idle(newest_complete(run_dir, checkpoints_root))
    }

    /// A stop that came while the step's worker was being launched: nothing trained
    /// yet, so nothing was saved; the worker is cancelled once it exists.
    fn during_launch(
        step: PipelineStep,
        checkpoints_root: &Path,
        run_dir: Option<&Path>,
    ) -> StopReport {
        let latest = newest_complete(run_dir, checkpoints_root);
        let newest = match &latest {
            Some(p) => format!("newest complete checkpoint: {}", p.display()),
            None => "there is no complete checkpoint".into(),
        };
        StopReport {
            was_running: true,
            step: Some(step),
            saved_checkpoint: None,
            message: format!(
                "step {step} was stopped while its worker was being launched (nothing trained yet, nothing saved); {newest}"
            ),
            latest_checkpoint: latest,
            killed: false,
            nothing_to_save: false,
        }
    }

    fn after_exit(
        step: PipelineStep,
        mark: &StopMark,
        checkpoints_root: &Path,
        killed: bool,
    ) -> StopReport {
        // The worker has exited: its final heartbeat, read once.
        let last = mark
            .run_dir
            .as_deref()
            .and_then(|d| heartbeat::read(&heartbeat::path(d)).ok());
        let saved = saved_since(mark, checkpoints_root, killed, last.as_ref());
        let newest =
            lavender::checkpoint::newest_complete(mark.run_dir.as_deref(), checkpoints_root);
        let how = if killed {
            "did not exit within the timeout and was killed (SIGKILL)"
        } else {
            "stopped"
        };
        let nothing_to_save = saved.is_none()
            && !killed
            && newest
                .as_ref()
                .zip(mark.run_dir.as_deref())
                .zip(last.as_ref())
                .is_some_and(|((c, run), hb)| holds_last_step(run, c, hb));
        let latest = newest.map(|c| c.path);
        let message = match (&saved, &latest) {
            (Some(s), _) => format!("step {step} {how}; the stop saved {}", s.display()),
            (None, Some(l)) if nothing_to_save => format!(
                "step {step} {how}; nothing had trained since its last save, so the stop wrote nothing: {} holds the state it stopped at",
                l.display()
            ),
            (None, Some(l)) => format!(
                "step {step} {how}; no checkpoint was written by the stop; newest complete checkpoint: {}",
                l.display()
            ),
            (None, None) => format!(
                "step {step} {how}; no checkpoint was written and there is no complete checkpoint"
            ),
        };
        StopReport {
            was_running: true,
            step: Some(step),
            saved_checkpoint: saved,
            latest_checkpoint: latest,
            killed,
            nothing_to_save,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::trainer_state::{self, TrainerState};

    /// A run with one checkpoint at step 40 and the worker's final heartbeat
    /// (`stopping`, naming it) at `hb_step`; the stop began after the save.
    fn stopped_at(hb_step: u64) -> (tempfile::TempDir, StopMark) {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-a");
        let ckpt = run.join("pretrain-10-00-00-0001");
        std::fs::create_dir_all(&ckpt).unwrap();
        trainer_state::write(&ckpt, &TrainerState::new("pretrain", 40)).unwrap();
        let mark = StopMark::take(Some(&run), root.path());
        let hb = Heartbeat {
            latest_checkpoint: Some("pretrain-10-00-00-0001".into()),
            ..Heartbeat::new(hb_step, 100, "pretrain", WorkerState::Stopping)
        };
        heartbeat::write(&run, &hb).unwrap();
        (root, mark)
    }

    #[test]
    fn a_stop_right_after_a_save_has_nothing_to_save_and_says_which_checkpoint_holds_it() {
        let (root, mark) = stopped_at(40);
        let r = StopReport::after_exit(PipelineStep::Train, &mark, root.path(), false);
        assert!(r.nothing_to_save, "{r:?}");
        assert_eq!(r.saved_checkpoint, None);
        assert!(
            r.message
                .contains("nothing had trained since its last save")
                && r.message.contains("pretrain-10-00-00-0001"),
            "{}",
            r.message
        );
        // Killed, the worker's word is not enough.
        let r = StopReport::after_exit(PipelineStep::Train, &mark, root.path(), true);
        assert!(!r.nothing_to_save, "{r:?}");
    }

    #[test]
    fn a_stop_that_trained_past_the_last_save_without_saving_is_not_saved() {
        let (root, mark) = stopped_at(45);
        let r = StopReport::after_exit(PipelineStep::Train, &mark, root.path(), false);
        assert!(!r.nothing_to_save, "{r:?}");
        assert!(
            r.message.contains("no checkpoint was written by the stop"),
            "{}",
            r.message
        );
    }
}
