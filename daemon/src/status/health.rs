//! The heartbeat alerts the status refresher raises: "stalled" when the heartbeat
//! goes stale, "recovered" when the current worker's own heartbeat is fresh again
//! after a stall or after a crash restart.

use std::time::Instant;

use chrono::{DateTime, Utc};
use lavender::config::PipelineStep;
use lavender::status::{PipelineState, Status};

use crate::alert::Alert;
use lavender::pipeline_file::PipelineRecord;

pub struct HeartbeatWatch {
    /// When the heartbeat went stale (the stall alert was sent).
    stale_since: Option<Instant>,
    /// The step that crashed and when: its restart recovers once the new worker's
    /// heartbeat is fresh.
    crashed: Option<(PipelineStep, Instant)>,
    restarts_seen: u32,
}

impl HeartbeatWatch {
    /// `record`: the pipeline as the daemon found it (a re-adopted worker's earlier
    /// restarts are not a new crash).
    pub fn new(record: &PipelineRecord) -> HeartbeatWatch {
        HeartbeatWatch {
            stale_since: None,
            crashed: None,
            restarts_seen: record.restarts,
        }
    }

    /// After a refresh: the alerts due. `heartbeat_at`: when the heartbeat on disk
    /// was written, if there is one; `allowance_s`: the allowance of the phase the
    /// worker is in (`lavender::stall`); `being_killed`: the worker running now was
    /// reported hung, so a heartbeat it writes while it goes (a save on SIGTERM) is
    /// no recovery.
    pub fn observe(
        &mut self,
        record: &PipelineRecord,
        status: &Status,
        heartbeat_at: Option<DateTime<Utc>>,
        allowance_s: u64,
        being_killed: bool,
    ) -> Option<Alert> {
        // A crash: the record says so, or restarts went up in between two looks.
        if (record.state.kind() == PipelineState::Crashed || record.restarts > self.restarts_seen)
            && self.crashed.is_none()
            && let Some(step) = record.active_step
        {
            self.crashed = Some((step, Instant::now()));
        }
        self.restarts_seen = record.restarts;
        // The restart is over once the pipeline has left that step (done, failed, stopped).
        if let Some((step, _)) = &self.crashed
            && !(matches!(
                record.state.kind(),
                PipelineState::Running | PipelineState::Crashed
            ) && record.active_step.as_ref() == Some(step))
        {
            self.crashed = None;
        }

        // A heartbeat is stale or fresh only while a worker of a step runs; without
        // an active step there is no step's stall or recovery to tell.
        let training_step = status.training.step;
        if status.training.heartbeat_stale {
            if self.stale_since.is_some() {
                return None;
            }
            self.stale_since = Some(Instant::now());
            return status.active_step.map(|step| Alert::Stale {
                step,
                age_s: status.training.heartbeat_age_s,
                stale_after_s: allowance_s,
                training_step,
            });
        }
        let since = match (self.stale_since, &self.crashed) {
            (Some(s), Some((_, c))) => s.min(*c),
            (Some(s), None) => s,
            (None, Some((_, c))) => *c,
            (None, None) => return None,
        };
        // Written by the worker running now (not left behind by the one that died).
        let from_current_worker = record
            .worker()
            .map(|w| w.started_at)
            .zip(heartbeat_at)
            .is_some_and(|(started, at)| at >= started);
        if status.pipeline.running && from_current_worker && !being_killed {
            self.crashed = None;
            // A worker brought back after a crash, with no stall: no stall to time
            // (the incident's end is the decision log's `IncidentOver`).
            let stalled = self.stale_since.is_some();
            self.stale_since = None;
            return status.active_step.map(|step| Alert::Recovered {
                step,
                stalled_for: stalled.then(|| since.elapsed()),
                training_step,
            });
        }
        // Not stale because nothing runs any more (stopped, finished): no recovery to tell.
        if self.crashed.is_none() && !status.pipeline.running {
            self.stale_since = None;
        }
        None
    }
}
