//! What a stop saved. The worker saves on SIGTERM; which checkpoint that was is read
//! from its events since the stop began (final_saved / checkpoint_saved with a
//! path), then its final heartbeat, then the listing. Only complete checkpoints count.

use std::path::{Path, PathBuf};

use lavender::config::PipelineStep;
use lavender::events::{self, kind};
use lavender::heartbeat::{self, WorkerState};
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
pub fn saved_since(mark: &StopMark, checkpoints_root: &Path, killed: bool) -> Option<PathBuf> {
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
    if let Ok(hb) = heartbeat::read(&heartbeat::path(run_dir))
        && hb.state == WorkerState::Stopping
        && let Some(name) = hb.latest_checkpoint
        && is_new(&run_dir.join(&name))
    {
        return Some(run_dir.join(name));
    }
    if killed {
        return None;
    }
    saved_event(kind::CHECKPOINT_SAVED)
        .or_else(|| newest_complete(Some(run_dir), checkpoints_root).filter(|p| is_new(p)))
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
        }
    }

    fn after_exit(
        step: PipelineStep,
        mark: &StopMark,
        checkpoints_root: &Path,
        killed: bool,
    ) -> StopReport {
        let saved = saved_since(mark, checkpoints_root, killed);
        let latest = newest_complete(mark.run_dir.as_deref(), checkpoints_root);
        let how = if killed {
            "did not exit within the timeout and was killed (SIGKILL)"
        } else {
            "stopped"
        };
        let message = match (&saved, &latest) {
            (Some(s), _) => format!("step {step} {how}; the stop saved {}", s.display()),
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
            message,
        }
    }
}
