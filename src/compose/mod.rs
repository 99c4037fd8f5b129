//! The status contract ([`crate::status::Status`]) put together from the pipeline's
//! record, what the files say ([`FileFacts`]) and the clock (ages are computed now,
//! not when the facts were read). Pure: the daemon's refresher composes it at
//! request time from its cached facts, and `lavenderd status` with no daemon from
//! the files, the same way.

mod disk_trend;
mod facts;
mod settings;

pub use disk_trend::DiskTrend;
pub use facts::{DiskReading, FileFacts};
pub use settings::StatusSettings;

use chrono::{DateTime, Utc};

use crate::config::PipelineStep;
use crate::pipeline_file::PipelineRecord;
use crate::stall::{self, Watch};
use crate::status::{
    DataStatus, DiskStatus, PipelineState, PipelineStatus, SCHEMA_VERSION, Status, TrainingStatus,
};

/// What vouches that the worker the record names still lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// A daemon supervises it: the record names a worker exactly while the pipeline
    /// actor supervises a live one (it clears it as soon as it reaps the process or
    /// sees the Slurm job end), so a status costs no `/proc` read and never runs
    /// `scontrol`.
    Supervised,
    /// No daemon: whether the worker was found alive, probed once from the files
    /// (pid + start time, or the Slurm job); a record that says running while its
    /// worker is gone reads as crashed.
    Probed(bool),
}

/// The watch on the worker `record` names, when it counts as alive (see [`compose`]).
pub fn stall_watch(
    record: &PipelineRecord,
    facts: &FileFacts,
    settings: &StatusSettings,
    worker_alive: bool,
) -> Option<Watch> {
    let worker = record.worker().filter(|_| worker_alive);
    let said = facts.said.or_else(|| {
        stall::said_by(
            worker,
            facts.heartbeat.as_ref(),
            facts.step_heartbeat.as_ref(),
        )
    });
    stall::assess(
        worker,
        said.as_ref(),
        &settings.supervisor,
        record.heartbeat_interval_s,
    )
}

/// The status now, from `record` and `facts` (see [`Liveness`]).
pub fn compose(
    record: &PipelineRecord,
    facts: &FileFacts,
    settings: &StatusSettings,
    now: DateTime<Utc>,
    liveness: Liveness,
) -> Status {
    let daemon_running = liveness == Liveness::Supervised;
    let worker = record
        .worker()
        .filter(|_| liveness != Liveness::Probed(false));
    let alive = worker.is_some();
    let mut state = record.state.kind();
    if !daemon_running
        && !alive
        && matches!(state, PipelineState::Running | PipelineState::Stopping)
    {
        state = PipelineState::Crashed;
    }
    let active_step = match state {
        PipelineState::Running
        | PipelineState::Stopping
        | PipelineState::Crashed
        | PipelineState::WaitingForDisk => record.active_step,
        _ => None,
    };
    let steps = if record.steps.is_empty() {
        facts.idle_steps.clone()
    } else {
        record
            .steps
            .iter()
            .map(|s| (s.name.to_string(), s.state))
            .collect()
    };
    let stale = stall_watch(record, facts, settings, alive).is_some_and(|w| w.overdue(now));
    let training_alive = worker.is_some_and(|w| w.step == PipelineStep::Train);
    let training = TrainingStatus::from_heartbeat(
        facts.heartbeat.clone(),
        now,
        stale,
        training_alive,
        facts.checkpoints,
        facts.latest_checkpoint.clone(),
    );
    let training = TrainingStatus {
        verified_checkpoints: facts.verified_checkpoints,
        latest_verified_checkpoint: facts.latest_verified_checkpoint.clone(),
        replay: facts.replay.clone(),
        ..training
    };
    let scale = record.scale.unwrap_or(settings.default_scale);
    let mut data = DataStatus::from_counts(facts.data_counts.clone(), facts.checkpoints);
    let notices = data.note_shards_wanted(scale, settings.scales.get(scale).shards.into());
    Status {
        timestamp: crate::time::rfc3339_z(now),
        pipeline: PipelineStatus {
            running: alive,
            pid: worker.and_then(|w| w.handle.pid()),
            chunk: Some(record.chunk.unwrap_or(settings.default_chunk).to_string()),
            scale: Some(scale.to_string()),
            state,
            restarts: record.restarts,
            slurm: worker.and_then(|w| w.handle.slurm_job()).map(|j| {
                crate::status::SlurmJobStatus {
                    job_id: j.job_id.clone(),
                    node: j.node.clone(),
                    state: j.state.clone(),
                    reason: j.reason.clone(),
                    nodes: j.seen.nodes.clone(),
                    message: j.seen.message.clone(),
                }
            }),
            recovery: record.recovery.clone(),
            failure: record.failure.clone(),
            rollbacks: record.rollbacks.clone(),
            last_error: matches!(state, PipelineState::Failed | PipelineState::Crashed)
                .then(|| record.last_error.clone())
                .flatten(),
            lineage: facts.lineage.clone(),
            disk_wait: (state == PipelineState::WaitingForDisk)
                .then(|| record.disk_wait().cloned())
                .flatten(),
        },
        active_step,
        steps,
        training,
        data,
        disk: DiskStatus {
            next_save_bytes: facts.latest_checkpoint_bytes,
            time_to_full_s: facts.disk_trend.time_to_full_s(),
            ..facts.disk.clone()
        },
        schema_version: SCHEMA_VERSION,
        notices: notices.into_iter().collect(),
        goodput: facts.goodput.clone(),
        tracking: facts.tracking.clone(),
    }
}
