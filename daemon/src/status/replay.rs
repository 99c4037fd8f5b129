//! The replay watcher: follows the refresher's snapshots. While the pipeline's run
//! has a resume check waiting for steps (`state/replay/<run>.json`, kept before a
//! relaunch or a requeue: `lavender::replay::keep`), it reads the run's per-step
//! record as it grows and compares each replayed step, whichever worker writes it
//! (the check is kept before its worker exists, and a requeued Slurm job keeps its
//! handle). The first that differs goes to the pipeline actor (a `resume_mismatch`
//! decision, an alert, a stop if so configured); a pipeline that ends (stopped,
//! finished, failed) first leaves the check incomplete. The file is the check's
//! state, written whenever it moves: a daemon restarted in the middle goes on from
//! it, and the status reads it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lavender::pipeline_file::PipelineRecord;
use lavender::replay::{Replay, Stat, Verdict};
use lavender::status::PipelineState;
use tokio::sync::watch;

use super::cache::StatusSnapshot;
use crate::pipeline::{PipelineHandle, ResumeMismatch};

pub fn spawn(
    state_dir: PathBuf,
    snapshots: watch::Receiver<Arc<StatusSnapshot>>,
    pipeline: PipelineHandle,
) {
    tokio::spawn(run(state_dir, snapshots, pipeline));
}

async fn run(
    state_dir: PathBuf,
    mut snapshots: watch::Receiver<Arc<StatusSnapshot>>,
    pipeline: PipelineHandle,
) {
    let mut watcher = Watcher::default();
    loop {
        let (run_dir, over) = pipeline_run(&snapshots.borrow_and_update().record);
        let state = state_dir.clone();
        let looked = tokio::task::spawn_blocking(move || {
            watcher.look(&state, run_dir, over);
            watcher
        })
        .await;
        let Ok(looked) = looked else {
            return;
        };
        watcher = looked;
        if let Some(report) = watcher.unreported.take()
            && !pipeline.report_resume_mismatch(report.clone())
        {
            // A full queue: said again at the next look.
            watcher.unreported = Some(report);
        }
        if snapshots.changed().await.is_err() {
            return;
        }
    }
}

/// The pipeline's run, and whether the pipeline is over (no worker will train in
/// it again without a start: idle, stopped, finished, failed).
fn pipeline_run(record: &PipelineRecord) -> (Option<PathBuf>, bool) {
    let over = matches!(
        record.state.kind(),
        PipelineState::Idle
            | PipelineState::Stopped
            | PipelineState::Finished
            | PipelineState::Failed
    );
    (record.run_dir.clone(), over)
}

/// The check followed now, and what the check's file was when last found with
/// nothing to follow.
#[derive(Default)]
struct Watcher {
    following: Option<Following>,
    /// The file's stat when it was last read (or written) and held no check to
    /// follow: not read again until it changes.
    seen: Option<Stat>,
    unreported: Option<ResumeMismatch>,
}

struct Following {
    run_dir: PathBuf,
    replay: Replay,
    /// Bytes of the record read so far.
    offset: u64,
    /// The file as this watcher last read or wrote it: another stat means a keep
    /// (a relaunch, a requeued job) replaced the check.
    stat: Option<Stat>,
}

impl Watcher {
    /// One look at the check of `run_dir`'s run; `over`: the pipeline ended.
    fn look(&mut self, state_dir: &Path, run_dir: Option<PathBuf>, over: bool) {
        if let Some(mut f) = self.following.take() {
            self.read(state_dir, &mut f);
            let now = lavender::replay::stat(state_dir, &f.replay.run);
            let same_run = run_dir.as_ref() == Some(&f.run_dir);
            if now != f.stat {
                // A newer keep: that check is the one to follow (below).
                self.seen = None;
            } else if f.replay.verdict != Verdict::Checking {
                self.seen = f.stat;
            } else if over || !same_run {
                // What the last worker wrote is read: the rest never came.
                f.replay.ended();
                self.seen = write(state_dir, &f.replay);
            } else {
                self.following = Some(f);
            }
        }
        let Some(run_dir) = run_dir.filter(|_| self.following.is_none()) else {
            return;
        };
        let run = run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let now = lavender::replay::stat(state_dir, &run);
        if now.is_none() || now == self.seen {
            return;
        }
        let Some(mut replay) =
            Replay::read(state_dir, &run).filter(|r| r.verdict == Verdict::Checking)
        else {
            self.seen = now;
            return;
        };
        if over {
            // Left waiting by a daemon that stopped before the pipeline ended.
            replay.ended();
            self.seen = write(state_dir, &replay);
            return;
        }
        let mut f = Following {
            run_dir,
            replay,
            offset: 0,
            stat: now,
        };
        self.read(state_dir, &mut f);
        if f.replay.verdict == Verdict::Checking {
            self.following = Some(f);
        } else {
            self.seen = f.stat;
        }
    }

    /// Reads what the record gained and compares it; the file follows the check.
    fn read(&mut self, state_dir: &Path, f: &mut Following) {
        let record = f.run_dir.join(lavender::log_history::SIDECAR);
        let (steps, offset) = match lavender::replay::read_from(&record, f.offset) {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!("replay check: {e}; read again at the next look");
                return;
            }
        };
        f.offset = offset;
        let before = (f.replay.checked, f.replay.verdict, f.replay.expected.len());
        for again in &steps {
            if let Some(mismatch) = f.replay.observe(again).cloned() {
                self.unreported = Some(ResumeMismatch {
                    run_dir: f.run_dir.clone(),
                    checkpoint: f.replay.checkpoint.clone(),
                    mismatch,
                    tolerance: f.replay.tolerance,
                });
            }
        }
        if (f.replay.checked, f.replay.verdict, f.replay.expected.len()) != before {
            if f.replay.verdict == Verdict::Passed {
                tracing::info!(
                    "replay check: the {} step(s) replayed after {} agree with the first pass ({})",
                    f.replay.checked,
                    f.replay.checkpoint,
                    f.replay.tolerance
                );
            }
            if let Some(written) = write(state_dir, &f.replay) {
                f.stat = Some(written);
            }
        }
    }
}

/// Writes the check followed, unless a keep replaced it meanwhile; the file's stat
/// after the write (`None`: not written).
fn write(state_dir: &Path, replay: &Replay) -> Option<Stat> {
    match replay.write_if_current(state_dir) {
        Ok(written) => written,
        Err(e) => {
            tracing::warn!("replay check: could not write its state: {e}");
            None
        }
    }
}
