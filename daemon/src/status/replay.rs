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
use lavender::replay::{Replay, Verdict};
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

/// The check followed now, and which worker's check is over.
#[derive(Default)]
struct Watcher {
    following: Option<Following>,
    /// The worker whose check is done (or that has none): not looked up again.
    done_for: Option<WorkerHandle>,
    unreported: Option<ResumeMismatch>,
}

struct Following {
    worker: WorkerHandle,
    run_dir: PathBuf,
    replay: Replay,
    /// Bytes of the record read so far.
    offset: u64,
}

impl Watcher {
    /// One look: the worker now training (if any) against the check followed.
    fn look(&mut self, state_dir: &Path, worker: Option<(WorkerHandle, PathBuf)>) {
        let same = |f: &Following| worker.as_ref().is_some_and(|(w, _)| *w == f.worker);
        if let Some(mut f) = self.following.take() {
            // What the worker wrote before it ended counts.
            self.read(state_dir, &mut f);
            if same(&f) {
                self.following = Some(f);
            } else if f.replay.verdict == Verdict::Checking {
                f.replay.ended();
                write(state_dir, &f.replay);
            }
        }
        if self.following.is_none()
            && let Some((worker, run_dir)) = worker
            && self.done_for.as_ref() != Some(&worker)
        {
            let run = run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            match Replay::read(state_dir, &run).filter(|r| r.verdict == Verdict::Checking) {
                Some(replay) => {
                    let mut f = Following {
                        worker,
                        run_dir,
                        replay,
                        offset: 0,
                    };
                    self.read(state_dir, &mut f);
                    self.following = Some(f);
                }
                None => self.done_for = Some(worker),
            }
        }
        if let Some(f) = self
            .following
            .take_if(|f| f.replay.verdict != Verdict::Checking)
        {
            self.done_for = Some(f.worker);
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
            write(state_dir, &f.replay);
        }
    }
}

/// Writes the check followed, unless a relaunch kept a newer one meanwhile.
fn write(state_dir: &Path, replay: &Replay) {
    if let Err(e) = replay.write_if_current(state_dir) {
        tracing::warn!("replay check: could not write its state: {e}");
    }
}
