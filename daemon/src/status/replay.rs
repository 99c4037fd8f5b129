//! The replay watcher: follows the refresher's snapshots. While a training worker
//! runs in a run whose resume check waits for steps (`state/replay/<run>.json`,
//! kept by the launch: `lavender::replay::keep`), it reads the run's per-step record
//! as it grows and compares each replayed step. The first that differs goes to the
//! pipeline actor (a `resume_mismatch` decision, an alert, a stop if so configured);
//! a worker that ends first leaves the check incomplete. The file is the check's
//! state, written whenever it moves: a daemon restarted in the middle goes on from
//! it, and the status reads it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lavender::pipeline_file::{PipelineRecord, WorkerHandle};
use lavender::replay::{Replay, Stat, Verdict};
use tokio::sync::watch;

use super::cache::StatusSnapshot;
use crate::pipeline::{PipelineHandle, ResumeMismatch};
use lavender::config::PipelineStep;

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
        let worker = training_worker(&snapshots.borrow_and_update().record);
        let state = state_dir.clone();
        let looked = tokio::task::spawn_blocking(move || {
            watcher.look(&state, worker);
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

/// The training worker the record names, and the run it writes.
fn training_worker(record: &PipelineRecord) -> Option<(WorkerHandle, PathBuf)> {
    let worker = record
        .state
        .worker()
        .filter(|w| w.step == PipelineStep::Train)?;
    Some((worker.handle.clone(), record.run_dir.clone()?))
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
    worker: WorkerHandle,
    run_dir: PathBuf,
    replay: Replay,
    /// Bytes of the record read so far.
    offset: u64,
    /// The file as this watcher last read or wrote it: another stat means a keep
    /// (a relaunch, a requeued job) replaced the check.
    stat: Option<Stat>,
}

impl Watcher {
    /// One look: the worker now training (if any) against the check followed.
    fn look(&mut self, state_dir: &Path, worker: Option<(WorkerHandle, PathBuf)>) {
        if let Some(mut f) = self.following.take() {
            // What the worker wrote before it ended counts.
            self.read(state_dir, &mut f);
            let now = lavender::replay::stat(state_dir, &f.replay.run);
            let same_worker = worker.as_ref().is_some_and(|(w, _)| *w == f.worker);
            if now != f.stat {
                // A newer keep: that check is the one to follow (below).
                self.seen = None;
            } else if !same_worker && f.replay.verdict == Verdict::Checking {
                f.replay.ended();
                self.seen = write(state_dir, &f.replay);
            } else if f.replay.verdict != Verdict::Checking {
                self.seen = f.stat;
            } else {
                self.following = Some(f);
            }
        }
        if self.following.is_none()
            && let Some((worker, run_dir)) = worker
        {
            let run = run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let now = lavender::replay::stat(state_dir, &run);
            if now.is_none() || now == self.seen {
                return;
            }
            match Replay::read(state_dir, &run).filter(|r| r.verdict == Verdict::Checking) {
                Some(replay) => {
                    let mut f = Following {
                        worker,
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
                None => self.seen = now,
            }
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
        let checked = f.replay.checked;
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
        if f.replay.checked != checked {
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
