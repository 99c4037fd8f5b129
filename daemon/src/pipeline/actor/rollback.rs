//! A worker that stopped with `diverged`, under `supervisor.on_diverged: rollback`:
//! the run goes back to its newest complete checkpoint saved before the divergence
//! began, the checkpoints saved since are set aside, the data that led to it is
//! recorded as skipped (`pipeline/rollback.rs` plans and applies that), and the
//! worker restarts at once from that checkpoint. After `supervisor.max_rollbacks`
//! rollbacks within `supervisor.rollback_window_steps` steps, or with nothing before
//! the divergence to go back to, the pipeline fails naming the divergence.

use lavender::config::PipelineStep;
use lavender::failure::Failure;
use std::time::Duration;

use super::Actor;
use crate::alert::Alert;
use crate::exit::ExitOutcome;
use crate::pipeline::machine::{Crash, Event, PendingRestart, Restart};
use crate::pipeline::rollback::{self, NoRollback, Rollback};
use lavender::steps::start::ResolvedStart;

impl Actor {
    /// `failure` (a divergence) ended the worker of `step`, which last reported
    /// training step `last_step`.
    pub(super) fn roll_back(
        &mut self,
        step: PipelineStep,
        failure: Failure,
        outcome: ExitOutcome,
        last_step: Option<u64>,
    ) {
        let detected = failure.step.or(last_step).unwrap_or(0);
        let planned = self.plan_rollback(&failure, detected);
        let rb = match planned {
            Ok(rb) => rb,
            Err(NoRollback(reason)) => {
                self.no_rollback(step, &failure, &reason);
                return self.fail_after(step, reason, Some(outcome), Some(failure));
            }
        };
        let since = failure.since_step.unwrap_or(detected);
        let target = match rb.target.as_deref().and_then(|p| p.file_name()) {
            Some(name) => format!("{} (step {})", name.to_string_lossy(), rb.range.from_step),
            None => "the start".to_string(),
        };
        let mut message = format!(
            "diverged at step {detected} (since step {since}): rolled back to {target}, skipping the data of steps {}..={}; rollback {} of {}",
            rb.range.from_step + 1,
            rb.range.to_step,
            rb.number,
            self.config.supervisor.max_rollbacks
        );
        if !rb.set_aside.is_empty() {
            message.push_str(&format!(
                "; {} checkpoint(s) saved after the divergence began set aside as {}<name>",
                rb.set_aside.len(),
                lavender::skips::SET_ASIDE_PREFIX
            ));
        }
        tracing::warn!(%step, "{message}");
        self.rolled_back(step, &failure, &message);
        // At once: the data that diverged is skipped, so the restart is not a retry.
        self.on(Event::RestartDecided {
            delay: Duration::ZERO,
            restart: Restart {
                why: Some(PendingRestart::RolledBack {
                    failure,
                    message: message.clone(),
                }),
                last_exit: Some(outcome),
            },
            crash: Some(Crash {
                error: message.clone(),
                restarts: None,
                rolled_back: Some(rb.range.clone()),
            }),
        });
        self.commit();
        self.alert(Alert::RolledBack {
            step,
            message,
            rollback: rb.number,
            max_rollbacks: self.config.supervisor.max_rollbacks,
        });
    }

    /// Plans and applies the rollback of the current run: a listing, a few renames
    /// and one small record, on the actor as the restart's resume resolution
    /// (`plan::spawn_spec`) is.
    fn plan_rollback(&self, failure: &Failure, detected: u64) -> Result<Rollback, NoRollback> {
        let Some(run_dir) = self.record.run_dir.as_deref() else {
            return Err(NoRollback(format!(
                "{}; the pipeline has no run directory to roll back",
                failure.message
            )));
        };
        let at = lavender::time::rfc3339_z(lavender::time::now_utc());
        let rb = rollback::plan(
            run_dir,
            ResolvedStart::of_record(&self.record, &self.config).chunk,
            self.record.resume_from.as_deref(),
            failure,
            detected,
            &self.config.supervisor,
            &at,
        )?;
        rollback::apply(run_dir, &rb)
            .map_err(|e| NoRollback(format!("{}; cannot roll back: {e}", failure.message)))?;
        Ok(rb)
    }
}
