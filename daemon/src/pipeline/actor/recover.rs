//! After a daemon restart: the worker of `pipeline.json` re-adopted if it lives,
//! judged from its files if it ended unwatched, or a pending restart resumed. A
//! pipeline the previous daemon's exit interrupted, or that a power loss took
//! down with its worker, resumes (`resume.rs`).

use chrono::Utc;
use lavender::status::PipelineState;
use tokio::time::Instant;

use super::{Actor, WorkerExit};
use crate::alert::Alert;
use crate::exit::ExitOutcome;
use crate::pipeline::judge::{Verdict, judge};
use crate::pipeline::machine::{Escalation, Event, Found, LiveWorker, Restart, Stop};
use crate::pipeline::stop::StopMark;
use crate::pipeline::timings::{restart_delay, stop_timeout};
use crate::process::Alive;
use lavender::pipeline_file::StopCause;
use lavender::steps::inputs::LocalFiles;

impl Actor {
    /// After a daemon restart: adopt a live worker, or account for one that ended
    /// while no daemon was watching, or resume a pending restart or an interrupted
    /// pipeline.
    pub(super) fn recover(&mut self) {
        let interrupted = matches!(
            self.record.stop_cause(),
            Some(StopCause::DaemonExit | StopCause::PowerLoss)
        );
        if let Some(w) = self.record.worker().cloned() {
            if w.handle.is_alive() {
                let elapsed = (Utc::now() - w.started_at).to_std().unwrap_or_default();
                let started = Instant::now()
                    .checked_sub(elapsed)
                    .unwrap_or_else(Instant::now);
                self.generation += 1;
                let worker = LiveWorker {
                    generation: self.generation,
                    handle: w.handle.clone(),
                    step: w.step,
                    started,
                    started_at: w.started_at,
                    own_child: false,
                    resumed_from_step: w.resumed_from_step,
                };
                self.watch_adopted(self.generation, w.step, w.handle.clone());
                // The stop under way when the previous daemon died: finish it.
                let stop = (self.record.state.kind() == PipelineState::Stopping).then(|| Stop {
                    escalation: Escalation::Term {
                        kill_at: Instant::now() + stop_timeout(&self.config.supervisor),
                    },
                    waiters: Vec::new(),
                    mark: StopMark::take(
                        self.record.run_dir.as_deref(),
                        &self.layout.checkpoints_root(),
                    ),
                    resume_after: interrupted,
                });
                self.on(Event::Adopted { worker, stop });
                tracing::info!(worker = %w.handle, step = %w.step, "re-adopted running worker");
                self.alert(Alert::Adopted {
                    step: w.step,
                    worker: w.handle.to_string(),
                });
                self.commit();
                return;
            }
            // It ended while no daemon watched: judge it from the files.
            let was_stopping = self.record.state.kind() == PipelineState::Stopping;
            if !was_stopping {
                let judged = judge(
                    w.step,
                    ExitOutcome::Unknown,
                    self.record.run_dir.as_deref(),
                    &self.layout.data_root,
                    Some(w.started_at),
                );
                if let Verdict::Failed { said: false, .. } = judged.verdict {
                    // Gone without a word, and the daemon with it: a power loss, a
                    // reboot, or both killed. Not the worker's failure: resume.
                    self.on(Event::FoundAtStart(Found::WorkerGone));
                    self.resume_at_start(StopCause::PowerLoss);
                    return;
                }
            }
            self.generation += 1;
            let worker = LiveWorker {
                generation: self.generation,
                started_at: w.started_at,
                handle: w.handle,
                step: w.step,
                started: Instant::now(),
                own_child: false,
                resumed_from_step: w.resumed_from_step,
            };
            let stop = was_stopping.then(|| Stop {
                escalation: Escalation::Term {
                    kill_at: Instant::now(),
                },
                waiters: Vec::new(),
                mark: StopMark {
                    run_dir: self.record.run_dir.clone(),
                    events_offset: 0,
                    newest_before: None,
                },
                resume_after: interrupted,
            });
            self.on(Event::Adopted { worker, stop });
            // At the daemon's start, before the actor serves anything: its files
            // are read here.
            let files = self
                .ran_with(w.step)
                .map(|config| LocalFiles::read_steps([w.step], &config))
                .unwrap_or_default();
            self.on_exit(WorkerExit {
                generation: self.generation,
                outcome: ExitOutcome::Unknown,
                files,
            });
            return;
        }
        if self.record.restart_pending() {
            self.on(Event::RestartDecided {
                delay: restart_delay(&self.config.supervisor, self.record.restarts),
                restart: Restart {
                    why: None,
                    last_exit: None,
                },
                crash: None,
            });
        } else if self.record.state.kind() == PipelineState::Running {
            // The daemon died between two steps.
            self.on(Event::BetweenSteps);
        } else if self.record.state.kind() == PipelineState::Stopping {
            self.on(Event::FoundAtStart(Found::StopOver));
            self.commit();
            if interrupted {
                self.resume_at_start(StopCause::DaemonExit);
            }
        } else if self.record.state.kind() == PipelineState::Stopped {
            match self.record.stop_cause() {
                Some(cause @ (StopCause::DaemonExit | StopCause::PowerLoss)) => {
                    self.resume_at_start(cause)
                }
                Some(StopCause::Operator | StopCause::External) => tracing::info!(
                    "the pipeline was stopped by {}; it stays stopped until `lavenderd start`",
                    if self.record.stop_cause() == Some(StopCause::Operator) {
                        "the operator"
                    } else {
                        "a SIGTERM from outside lavenderd"
                    }
                ),
                None => {}
            }
        }
    }
}
