//! The status contract, computed from a cache of what the files say (refreshed by
//! file-watch events and a periodic safety net) plus the pipeline actor's record.
//! `GET /status` serializes it; `lavenderd status --json` computes the same from
//! the files when no daemon runs.

pub mod cache;
pub mod compose;
pub mod disk;
pub mod facts;
pub mod health;
pub mod watch;

pub use cache::StatusCache;
pub use compose::{StatusSettings, compose};
pub use facts::FileFacts;

use crate::layout::Layout;
use crate::pipeline::PipelineRecord;

/// The status from the files alone (no daemon): pipeline.json, the worker's
/// liveness by pid + start time, heartbeat, checkpoints, manifests, disk.
pub fn offline(
    layout: &Layout,
    settings: &StatusSettings,
) -> anyhow::Result<lavender::status::Status> {
    let record = PipelineRecord::load(layout)?;
    let facts = FileFacts::read(layout, &record, settings, true);
    Ok(compose(
        &record,
        &facts,
        settings,
        lavender::time::now_utc(),
        false,
    ))
}
