//! A hung worker (the watchdog's report: no heartbeat within its phase's
//! allowance, or no progress beat of a data step within
//! `data_step_stale_after_s`; `supervisor.on_stall: restart`): its whole process group, or its
//! Slurm job, gets SIGTERM, then SIGKILL after `stall_kill_grace_s` (a hung
//! process may ignore SIGTERM, or be stopped); its exit restarts it from the run's
//! latest complete checkpoint (`restart.rs`).

use std::time::Duration;

use super::Actor;
use crate::pipeline::handle::HungReport;
use crate::pipeline::machine::Event;
use crate::pipeline::timings::stall_kill_grace;

impl Actor {
    pub(super) fn on_hung(&mut self, report: HungReport) {
        if self.hang_observed(&report) || self.capture_hang(&report) {
            return;
        }
        self.hung_judged(report);
    }

    /// The hung worker is to be killed: SIGTERM, then SIGKILL after the grace.
    pub(super) fn hung_judged(&mut self, report: HungReport) {
        let grace = stall_kill_grace(&self.config.supervisor);
        let said = format!("{}{}", hung_text(&report), self.hang_bundle_text());
        self.on(Event::HungJudged {
            report,
            grace,
            said,
        });
    }

    /// The hung worker got its SIGTERM (the record says why).
    pub(super) fn hung_kill_begun(&mut self, report: &HungReport, grace: Duration) {
        let text = self.record.last_error.clone().unwrap_or_default();
        let worker = self.phase.worker().map_or(&report.worker, |w| &w.handle);
        tracing::warn!(
            worker = %worker,
            "{text} ({} allows {:.1} s); killing it (SIGTERM, SIGKILL after {:.1} s) to restart it",
            report.allowance_key,
            report.allowance.as_secs_f64(),
            grace.as_secs_f64()
        );
        self.commit();
        self.hang_kill_decided(report.work, report, grace);
    }
}

/// "hung at step 40 for 5m 0s", "hung at step 40 while saving for 31m 2s", "hung
/// while starting for 10m 0s"; a data step: "dedup hung for 30m 0s".
pub(super) fn hung_text(report: &HungReport) -> String {
    let how_long = lavender::time::duration(round_up(report.stalled_for));
    if report.work != lavender::config::PipelineStep::Train {
        return format!("{} hung for {how_long}", report.work);
    }
    match (report.step, report.phase) {
        (Some(step), lavender::heartbeat::WorkerState::Training) => {
            format!("hung at step {step} for {how_long}")
        }
        (Some(step), phase) => format!("hung at step {step} while {phase} for {how_long}"),
        (None, phase) => format!("hung while {phase} for {how_long}"),
    }
}

/// Whole seconds, so 0.9 s of silence does not read as 0 s.
fn round_up(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}
