//! After a daemon restart: the worker of `pipeline.json` re-adopted if it lives,
//! judged from its files if it ended unwatched, or a pending restart resumed.

use chrono::{DateTime, Utc};
use lavender::status::PipelineState;
use tokio::time::Instant;

use super::{Actor, LiveWorker, Stopping, WorkerExit};
use crate::alert::Alert;
use crate::exit::ExitOutcome;
use crate::pipeline::stop::StopMark;

impl Actor {
    /// After a daemon restart: adopt a live worker, or account for one that ended
    /// while no daemon was watching, or resume a pending restart.
    pub(super) fn recover(&mut self) {
        if let Some(w) = self.record.worker.clone() {
            if w.handle.is_alive() {
                let elapsed = parse_time(&w.started_at)
                    .map(|t| (Utc::now() - t).to_std().unwrap_or_default())
                    .unwrap_or_default();
                let started = Instant::now()
                    .checked_sub(elapsed)
                    .unwrap_or_else(Instant::now);
                self.generation += 1;
                self.worker = Some(LiveWorker {
                    generation: self.generation,
                    handle: w.handle.clone(),
                    step: w.step,
                    started,
                    started_at: parse_time(&w.started_at),
                    own_child: false,
                });
                self.watch_adopted(self.generation, w.handle.clone());
                if self.record.state == PipelineState::Stopping {
                    // The stop was under way when the previous daemon died: finish it.
                    self.stopping = Some(Stopping {
                        deadline: Instant::now() + self.timings.stop_timeout,
                        killed: false,
                        waiters: Vec::new(),
                        mark: StopMark::take(
                            self.record.run_dir.as_deref(),
                            &self.layout.checkpoints_root(),
                        ),
                        step: w.step,
                    });
                } else {
                    self.record.state = PipelineState::Running;
                }
                tracing::info!(worker = %w.handle, step = %w.step, "re-adopted running worker");
                self.alert(Alert::Adopted {
                    step: w.step,
                    worker: w.handle.to_string(),
                });
                self.commit();
                return;
            }
            // It ended while no daemon watched: judge it from the files.
            let was_stopping = self.record.state == PipelineState::Stopping;
            self.generation += 1;
            self.worker = Some(LiveWorker {
                generation: self.generation,
                started_at: parse_time(&w.started_at),
                handle: w.handle,
                step: w.step,
                started: Instant::now(),
                own_child: false,
            });
            if was_stopping {
                self.stopping = Some(Stopping {
                    deadline: Instant::now(),
                    killed: false,
                    waiters: Vec::new(),
                    mark: StopMark {
                        run_dir: self.record.run_dir.clone(),
                        events_offset: 0,
                        newest_before: None,
                    },
                    step: w.step,
                });
            }
            self.on_exit(WorkerExit {
                generation: self.generation,
                outcome: ExitOutcome::Unknown,
            });
            return;
        }
        if self.record.restart_pending {
            self.restart_at =
                Some(Instant::now() + self.timings.backoff.before(self.record.restarts));
        } else if self.record.state == PipelineState::Running {
            // The daemon died between two steps.
            self.advance();
        } else if self.record.state == PipelineState::Stopping {
            self.record.state = PipelineState::Stopped;
            self.commit();
        }
    }
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}
