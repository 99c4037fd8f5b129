//! The decision log: every action the daemon takes on its own (a crash restart, a
//! hang kill, a rollback, giving up, …) appends one [`Decision`] to
//! `<state>/decisions.jsonl` with what it saw, the rule that fired and what it did;
//! once known, its [`Outcome`] follows as a line of its own naming the decision's
//! id (`record.rs` says why appended, not rewritten). `lavenderd incidents` reads it
//! (`show.rs`).
//!
//! The incident: the decisions since the last worker that ran well. Each waits for
//! its outcome: "failed again" when the next decision comes after a worker was
//! brought back, "recovered" once that worker trains past the step it resumed from
//! and the furthest step the incident's workers reached (a task off the actor reads
//! its heartbeat) or its step finishes, "gave up" when
//! the pipeline fails, "stopped" when an operator stops it first.

mod log;
pub(crate) mod record;
pub mod show;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::alert::{Alert, AlertSender};

use lavender::config::{LoggingConfig, PipelineStep};
use lavender::layout::Layout;

pub use log::{path, read};
pub use record::{Decision, DecisionKind, Evidence, Line, Mode, Outcome, OutcomeKind, Rule};

/// The daemon's decision log and its open incident; clones share both.
#[derive(Clone)]
pub(crate) struct Decisions {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    path: PathBuf,
    /// `None` once opening failed (said once in the daemon's log): the daemon
    /// supervises on without its log.
    writer: Option<log::Writer>,
    /// Decisions made by this daemon, for their ids.
    made: u64,
    /// The decisions of the open incident, waiting for their outcome.
    awaiting: Vec<String>,
    /// A worker was brought back since the newest of them.
    ran_since: bool,
    /// Bumped whenever the incident changes: a recovery watcher of an older one
    /// writes nothing.
    epoch: u64,
    /// When the open incident's first decision came, and the furthest step a
    /// worker of it reached, for what its recovery cost.
    opened: Option<Instant>,
    reached: Option<u64>,
    /// The decisions of the incident so far (those settled as failed again too).
    decided: usize,
    /// The push of an incident's end (`Alert::IncidentOver`).
    alerts: Option<AlertSender>,
}

impl Decisions {
    /// `alerts`: where the end of an incident is told (none in tests of the log alone).
    pub(crate) fn open(
        layout: &Layout,
        limits: LoggingConfig,
        alerts: Option<AlertSender>,
    ) -> Decisions {
        let path = path(layout);
        let writer = match log::Writer::open(&path, limits) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::error!(
                    "cannot open the decision log {}: {e}; decisions are only logged here",
                    path.display()
                );
                None
            }
        };
        Decisions {
            inner: Arc::new(Mutex::new(Inner {
                path,
                writer,
                made: 0,
                awaiting: Vec::new(),
                ran_since: false,
                epoch: 0,
                opened: None,
                reached: None,
                decided: 0,
                alerts,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it left whole lines behind: go on.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `decision` (its id and time filled in) and settles the incident it
    /// belongs to; returns its id.
    pub(crate) fn record(&self, mut decision: Decision) -> String {
        let mut inner = self.lock();
        inner.made += 1;
        let now = lavender::time::now_utc();
        decision.id = format!(
            "{}-{}-{}",
            now.format("%Y%m%dT%H%M%S%.3fZ"),
            std::process::id(),
            inner.made
        );
        decision.at = lavender::time::rfc3339_z(now);
        let id = decision.id.clone();
        let clock = lavender::time::clock(now);
        if inner.ran_since && decision.mode == Mode::Acted {
            let text = format!(
                "failed again at {clock}: {} followed",
                decision.kind.as_str()
            );
            inner.settle(OutcomeKind::FailedAgain, &text);
        }
        let (mode, kind, last_step) = (decision.mode, decision.kind, decision.saw.last_step);
        let said = match mode {
            Mode::Acted => format!(
                "decision: {} ({}): {}",
                kind.as_str(),
                decision.rule,
                decision.did
            ),
            Mode::WouldHave => format!(
                "observe mode: would have: {} ({}): {}",
                kind.as_str(),
                decision.rule,
                decision.did
            ),
        };
        tracing::warn!(step = %decision.step, "{said}");
        // The pipeline log tells the run's story: what the daemon did in it too.
        crate::logs::story::say(&said);
        inner.write(&Line::Decision(Box::new(decision)));
        match (mode, kind) {
            (Mode::WouldHave, _) => inner.write_outcome(
                &id,
                OutcomeKind::NotActed,
                "observe mode (supervisor.mode: observe): nothing was done",
            ),
            (Mode::Acted, DecisionKind::GiveUp) => {
                let text = format!(
                    "the pipeline failed at {clock} and waits for an operator (lavenderd start --resume latest once the cause is fixed)"
                );
                inner.settle(OutcomeKind::GaveUp, &text);
                inner.write_outcome(&id, OutcomeKind::GaveUp, &text);
            }
            // Done while the worker trains on: no incident to wait out.
            (Mode::Acted, DecisionKind::EarlyRetention | DecisionKind::ResumeMismatch) => {}
            (Mode::Acted, _) => {
                inner.opened.get_or_insert_with(Instant::now);
                inner.reached = inner.reached.max(last_step);
                inner.decided += 1;
                inner.awaiting.push(id.clone());
                inner.ran_since = false;
                inner.epoch += 1;
            }
        }
        id
    }

    /// A worker of `step` runs again; when the incident waits for it, a task reads
    /// its heartbeat (every `poll`) until it trains past `resumed_from` and the
    /// furthest step the incident's workers reached, and settles it as recovered.
    pub(crate) fn worker_running(
        &self,
        step: PipelineStep,
        run_dir: Option<&Path>,
        resumed_from: Option<u64>,
        poll: Duration,
    ) {
        let (epoch, reached) = {
            let mut inner = self.lock();
            if inner.awaiting.is_empty() {
                return;
            }
            inner.ran_since = true;
            inner.epoch += 1;
            (inner.epoch, inner.reached)
        };
        let (Some(run_dir), Some(from), PipelineStep::Train) = (run_dir, resumed_from, step) else {
            // A data step recovers when it finishes (`step_done`).
            return;
        };
        let heartbeat = lavender::heartbeat::path(run_dir);
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(poll).await;
                if this.lock().epoch != epoch {
                    return;
                }
                let past = tokio::task::spawn_blocking({
                    let heartbeat = heartbeat.clone();
                    move || lavender::heartbeat::read(&heartbeat).ok()
                })
                .await
                .ok()
                .flatten()
                // Past where it failed, not only past its checkpoint: a worker that
                // trains a few steps and fails at the same place has not recovered.
                .filter(|hb| hb.step > from.max(reached.unwrap_or(0)));
                if let Some(hb) = past {
                    let at = hb.time().map_or_else(
                        || lavender::time::clock(lavender::time::now_utc()),
                        lavender::time::clock,
                    );
                    let text = format!("training past step {} at {at}", hb.step);
                    let mut inner = this.lock();
                    if inner.epoch == epoch {
                        inner.recovered(step, from, &hb);
                        inner.settle(OutcomeKind::Recovered, &text);
                    }
                    return;
                }
            }
        });
    }

    /// `step` finished: an incident still open recovered.
    pub(crate) fn step_done(&self, step: PipelineStep) {
        let clock = lavender::time::clock(lavender::time::now_utc());
        self.lock().close(
            OutcomeKind::Recovered,
            &format!("step {step} finished at {clock}"),
        );
    }

    /// The pipeline was stopped (or the daemon exits) before the outcome was known.
    pub(crate) fn stopped(&self) {
        let clock = lavender::time::clock(lavender::time::now_utc());
        self.lock().close(
            OutcomeKind::Stopped,
            &format!("stopped at {clock} before the outcome was known"),
        );
    }
}

impl Inner {
    /// The incident's end told: where training is, how long it took, about how
    /// much training time it cost (the incident's span, and the steps from the
    /// checkpoint `from` to the furthest step reached, trained again).
    fn recovered(&self, step: PipelineStep, from: u64, hb: &lavender::heartbeat::Heartbeat) {
        let (Some(alerts), Some(opened)) = (&self.alerts, self.opened) else {
            return;
        };
        let after = opened.elapsed();
        let again = self.reached.map_or(0, |r| r.saturating_sub(from));
        let redo = hb
            .steps_per_sec
            .filter(|&s| s > 0.0)
            .and_then(|s| Duration::try_from_secs_f64(again as f64 / s).ok())
            .unwrap_or_default();
        let _ = alerts.send(Alert::IncidentOver {
            step,
            training_step: hb.step,
            after,
            lost: after + redo,
            attempts: self.decided,
        });
    }

    fn write(&mut self, line: &Line) {
        if let Some(w) = self.writer.as_mut()
            && let Err(e) = w.append(line)
        {
            tracing::error!(
                "cannot append to the decision log {}: {e}",
                self.path.display()
            );
        }
    }

    fn write_outcome(&mut self, of: &str, result: OutcomeKind, text: &str) {
        let outcome = Outcome {
            of: of.to_string(),
            at: lavender::time::rfc3339_z(lavender::time::now_utc()),
            result,
            text: text.to_string(),
        };
        self.write(&Line::Outcome(outcome));
    }

    /// An open incident ends with `result` and no push of its own: the alert sink
    /// is told ([`Alert::IncidentClosed`]) so the next failure is pushed again.
    fn close(&mut self, result: OutcomeKind, text: &str) {
        let open = !self.awaiting.is_empty();
        self.settle(result, text);
        if open && let Some(alerts) = &self.alerts {
            let _ = alerts.send(Alert::IncidentClosed {
                text: text.to_string(),
            });
        }
    }

    /// Every decision waiting gets `result`; the incident ends unless it failed again.
    fn settle(&mut self, result: OutcomeKind, text: &str) {
        let awaiting = std::mem::take(&mut self.awaiting);
        for id in &awaiting {
            self.write_outcome(id, result, text);
        }
        if !awaiting.is_empty() {
            tracing::info!("decision outcome: {} ({text})", result.as_str());
        }
        self.ran_since = false;
        self.epoch += 1;
        if result != OutcomeKind::FailedAgain {
            self.opened = None;
            self.reached = None;
            self.decided = 0;
        }
    }
}

impl Decision {
    /// A decision acted upon; [`Decisions::record`] gives it its id and time.
    pub fn new(
        kind: DecisionKind,
        step: PipelineStep,
        saw: Evidence,
        rule: Rule,
        did: impl Into<String>,
    ) -> Decision {
        Decision {
            id: String::new(),
            at: String::new(),
            kind,
            step,
            mode: Mode::Acted,
            saw,
            rule,
            did: did.into(),
            bundle: None,
        }
    }
}

#[cfg(test)]
mod tests;
