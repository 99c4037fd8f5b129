//! The actor's decisions written down (`crate::decisions`): what it saw, the rule
//! that fired, what it did; and, under `supervisor.mode: observe`, the decision
//! said as "would have" in place of the act.

use std::time::Duration;

use lavender::config::{NodeFailurePolicy, PipelineStep, SupervisorMode};

use super::Actor;
use crate::alert::Alert;
use crate::decisions::{Decision, DecisionKind, Evidence, Mode, Rule};
use crate::exit::ExitOutcome;
use crate::pipeline::handle::HungReport;
use crate::pipeline::machine::{LiveWorker, PendingRestart};
use crate::pipeline::policy::{self, Streak};

impl Actor {
    pub(super) fn observing(&self) -> bool {
        self.config.supervisor.mode == SupervisorMode::Observe
    }

    /// The run's last heartbeat: seconds since it was written (as its own
    /// timestamp says), and its step.
    pub(super) fn last_heartbeat(&self) -> Option<(Option<f64>, u64)> {
        let run_dir = self.record.run_dir.as_deref()?;
        let hb = lavender::heartbeat::read(&lavender::heartbeat::path(run_dir)).ok()?;
        let age = hb
            .time()
            .map(|t| (lavender::time::now_utc() - t).num_milliseconds().max(0) as f64 / 1000.0);
        Some((age, hb.step))
    }

    /// The policy's `decision` about `worker`, which ended (`why`, `outcome`),
    /// written down. False in observe mode: the caller does nothing more, and the
    /// pipeline has failed saying what would have been done.
    pub(super) fn write_down(
        &mut self,
        worker: &LiveWorker,
        why: &PendingRestart,
        outcome: ExitOutcome,
        streak: Streak,
        decision: &policy::Decision,
    ) -> bool {
        let sup = &self.config.supervisor;
        let step = worker.step;
        let heartbeat = self.last_heartbeat();
        let saw = Evidence {
            heartbeat_age_s: match why {
                PendingRestart::Hung(r) => Some(r.stalled_for.as_secs_f64()),
                _ => heartbeat.and_then(|(age, _)| age),
            },
            last_step: streak.failed_at.or(heartbeat.map(|(_, step)| step)),
            exit: Some(outcome.to_string()),
            failure: why.failure().cloned(),
            restarts: Some(streak.restarts),
            no_progress_restarts: Some(streak.no_progress),
            same_failure: Some(streak.same_failure),
            rollbacks: Some(self.record.rollbacks.len()),
            worker: Some(worker.handle.to_string()),
            ..Evidence::default()
        };
        let (kind, rule, did) = match decision {
            policy::Decision::Restart { restart, delay } => {
                let rule = match why.failure() {
                    Some(f) => Rule::new(format!("supervisor.on_failure.{}", f.kind), "restart"),
                    None => Rule::new("supervisor.on_stall", "restart"),
                };
                let when = if delay.is_zero() {
                    "at once".to_string()
                } else {
                    format!("after {:.1} s (supervisor.restart_backoff_s)", delay.as_secs_f64())
                };
                let did = format!(
                    "restart {restart} of {} (supervisor.max_restarts) from the run's latest complete checkpoint, {when}",
                    sup.max_restarts
                );
                (DecisionKind::Restart, rule, did)
            }
            // Acted on, it is written down by `roll_back`, which knows to what.
            policy::Decision::Rollback if !self.observing() => return true,
            policy::Decision::Rollback => (
                DecisionKind::Rollback,
                Rule::new("supervisor.on_diverged", "rollback"),
                "roll back to the newest checkpoint saved before the divergence and restart from it".to_string(),
            ),
            policy::Decision::Fail { reason, rule } => {
                (DecisionKind::GiveUp, rule.clone(), format!("failed the pipeline: {reason}"))
            }
        };
        if let policy::Decision::Fail { .. } = decision {
            // Giving up is no act: it is the same in observe mode.
            self.decisions
                .record(Decision::new(kind, step, saw, rule, did));
            return true;
        }
        if !self.observing() {
            self.decisions
                .record(Decision::new(kind, step, saw, rule, did));
            return true;
        }
        let mut d = Decision::new(kind, step, saw, rule, did);
        d.mode = Mode::WouldHave;
        let said = format!(
            "observe mode (supervisor.mode: observe): the worker ended ({outcome}{}); would have: {}; nothing was done",
            why.failure()
                .map(|f| format!(", {}: {}", f.kind, f.message))
                .unwrap_or_default(),
            d.did
        );
        self.decisions.record(d);
        self.fail_after(step, said, Some(outcome), why.failure().cloned());
        false
    }

    /// The rollback decided (the record does not show it yet), in the decision log.
    pub(super) fn rolled_back(
        &self,
        step: PipelineStep,
        failure: &lavender::failure::Failure,
        message: &str,
    ) {
        let saw = Evidence {
            last_step: failure.step,
            failure: Some(failure.clone()),
            rollbacks: Some(self.record.rollbacks.len()),
            ..Evidence::default()
        };
        let rule = Rule::new("supervisor.on_diverged", "rollback");
        self.decisions.record(Decision::new(
            DecisionKind::Rollback,
            step,
            saw,
            rule,
            message,
        ));
    }

    /// A rollback that cannot be done: the pipeline gives up.
    pub(super) fn no_rollback(
        &self,
        step: PipelineStep,
        failure: &lavender::failure::Failure,
        reason: &str,
    ) {
        let saw = Evidence {
            last_step: failure.step,
            failure: Some(failure.clone()),
            rollbacks: Some(self.record.rollbacks.len()),
            ..Evidence::default()
        };
        let rule = Rule::new(
            "supervisor.max_rollbacks",
            self.config.supervisor.max_rollbacks,
        );
        let did = format!("failed the pipeline: {reason}");
        self.decisions
            .record(Decision::new(DecisionKind::GiveUp, step, saw, rule, did));
    }

    fn hang_evidence(report: &HungReport, worker: String) -> Evidence {
        Evidence {
            heartbeat_age_s: Some(report.stalled_for.as_secs_f64()),
            phase: Some(report.phase.to_string()),
            last_step: report.step,
            worker: Some(worker),
            ..Evidence::default()
        }
    }

    /// The kill of a hung worker, in the decision log.
    pub(super) fn hang_kill_decided(
        &self,
        step: PipelineStep,
        report: &HungReport,
        grace: Duration,
    ) {
        let worker = self.phase.worker().map_or(&report.worker, |w| &w.handle);
        let saw = Self::hang_evidence(report, worker.to_string());
        let rule = Rule::new(report.allowance_key, report.allowance.as_secs_f64());
        let did = format!(
            "SIGTERM to the worker (its process group or Slurm job), SIGKILL after {:.1} s (supervisor.stall_kill_grace_s), then restart it",
            grace.as_secs_f64()
        );
        let mut d = Decision::new(DecisionKind::HangKill, step, saw, rule, did);
        d.bundle = self.hang_bundle.as_ref().map(|b| b.display().to_string());
        self.decisions.record(d);
    }

    /// Observe mode: a hung worker is left alone; the log, the decision log and a
    /// push say what would have been done. True when it was so handled.
    pub(super) fn hang_observed(&mut self, report: &HungReport) -> bool {
        if !self.observing() {
            return false;
        }
        let Some(worker) = self
            .phase
            .worker()
            .filter(|w| w.handle.same_as(&report.worker))
        else {
            return true;
        };
        let step = worker.step;
        let saw = Self::hang_evidence(report, worker.handle.to_string());
        let rule = Rule::new(report.allowance_key, report.allowance.as_secs_f64());
        let mut d = Decision::new(
            DecisionKind::HangKill,
            step,
            saw,
            rule,
            "kill the worker (SIGTERM, then SIGKILL after supervisor.stall_kill_grace_s) and restart it from the run's latest complete checkpoint",
        );
        d.mode = Mode::WouldHave;
        self.decisions.record(d);
        self.alert(Alert::Stale {
            step,
            age_s: Some(report.stalled_for.as_secs()),
            stale_after_s: report.allowance.as_secs(),
            training_step: report.step,
        });
        true
    }

    /// A Slurm node declared lost, in the decision log.
    pub(super) fn node_lost_decided(&self, step: PipelineStep, message: &str) {
        let policy = self.config.launch.slurm.on_node_failure;
        let saw = Evidence {
            note: Some(message.to_string()),
            ..Evidence::default()
        };
        let rule = Rule::new("launch.slurm.on_node_failure", policy);
        let did = format!(
            "declared the node lost; the job follows launch.slurm.on_node_failure ({message})"
        );
        self.decisions.record(Decision::new(
            DecisionKind::NodeLost,
            step,
            saw.clone(),
            rule.clone(),
            did,
        ));
        // The job goes back to the queue by the same rule; `fail` cancels it instead.
        let requeue = match policy {
            NodeFailurePolicy::Requeue => {
                "put the job back in the queue (the same job id); it resumes from the run's latest complete checkpoint on any free nodes"
            }
            NodeFailurePolicy::Wait => {
                "put the job back in the queue held to its nodes; it resumes from the run's latest complete checkpoint once the lost node is back"
            }
            NodeFailurePolicy::Fail => return,
        };
        self.decisions.record(Decision::new(
            DecisionKind::Requeue,
            step,
            saw,
            rule,
            requeue.to_string(),
        ));
        // The requeued job trains again the steps past the run's newest checkpoint:
        // they are kept for the replay check before it starts (Slurm's requeue takes
        // seconds), off the actor.
        if step == PipelineStep::Train
            && !self.observing()
            && let Some(run_dir) = self.record.run_dir.clone()
        {
            let (state_dir, tolerance) = (
                self.layout.state_dir.clone(),
                self.config.replay_tolerance(),
            );
            tokio::task::spawn_blocking(move || {
                if let Ok(Some(newest)) = lavender::checkpoint::latest_complete(&run_dir) {
                    super::start::keep_replay_at(&state_dir, &run_dir, &newest.path, tolerance);
                }
            });
        }
    }

    /// A damaged checkpoint set aside (`damaged.rs`), in the decision log: what was
    /// wrong with it, where it went, and what the run resumes from instead.
    pub(super) fn set_aside_decided(
        &self,
        step: PipelineStep,
        s: &lavender::checkpoint::fallback::SetAside,
        next: &str,
    ) {
        let saw = Evidence {
            note: Some(format!("checkpoint {} is damaged: {}", s.name, s.reason)),
            ..Evidence::default()
        };
        // No config key chooses this: a damaged checkpoint is never resumed from.
        let rule = Rule::new(
            "checkpoint.manifest",
            "resume from the newest that verifies",
        );
        let did = format!("set {} aside as {}; {next}", s.name, s.moved_to.display());
        let mut d = Decision::new(DecisionKind::CheckpointSetAside, step, saw, rule, did);
        if !s.moved {
            d.mode = Mode::WouldHave;
        }
        self.decisions.record(d);
    }
}
