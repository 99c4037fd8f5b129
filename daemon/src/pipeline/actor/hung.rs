//! A hung worker (the watchdog's report: no heartbeat within its phase's
//! allowance, or no progress beat of a data step within
//! `data_step_stale_after_s`; `supervisor.on_stall: restart`): its whole process group, or its
//! Slurm job, gets SIGTERM, then SIGKILL after `stall_kill_grace_s` (a hung
//! process may ignore SIGTERM, or be stopped); its exit restarts it from the run's
//! latest complete checkpoint (`restart.rs`).

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use super::{Actor, HungKill};
use crate::pipeline::handle::HungReport;

impl Actor {
    pub(super) fn on_hung(&mut self, report: HungReport) {
        let Some(worker) = &self.worker else {
            return;
        };
        // A report about a worker that already ended, or one being stopped or killed.
        if !worker.handle.same_as(&report.worker) || self.stopping.is_some() || self.hung.is_some()
        {
            return;
        }
        // A Slurm job waiting in the queue (requeued after a lost node or at its time
        // limit) runs nothing that could beat.
        if worker
            .handle
            .slurm_job()
            .is_some_and(|j| j.state.as_deref().is_some_and(|s| s != "RUNNING"))
        {
            tracing::info!(worker = %worker.handle, "no heartbeat while the Slurm job is not running: not hung");
            return;
        }
        let grace = self.timings.stall_kill_grace;
        let text = hung_text(&report);
        tracing::warn!(
            worker = %worker.handle,
            "{text} ({} allows {:.1} s); killing it (SIGTERM, SIGKILL after {:.1} s) to restart it",
            report.allowance_key,
            report.allowance.as_secs_f64(),
            grace.as_secs_f64()
        );
        self.backend
            .signal(&worker.handle, Signal::SIGTERM, worker.own_child);
        self.hung = Some(HungKill {
            deadline: Instant::now() + grace,
            killed: false,
            report,
        });
        self.record.last_error = Some(text);
        self.commit();
    }

    /// The grace passed: SIGKILL.
    pub(super) fn escalate_hung(&mut self) {
        let (Some(hung), Some(worker)) = (&mut self.hung, &self.worker) else {
            return;
        };
        if hung.killed || Instant::now() < hung.deadline {
            return;
        }
        tracing::warn!(worker = %worker.handle, "the hung worker is still there; SIGKILL");
        self.backend
            .signal(&worker.handle, Signal::SIGKILL, worker.own_child);
        hung.killed = true;
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
