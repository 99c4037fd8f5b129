//! The status contract. One writer: the refresher (`refresher.rs`) reads what the
//! files say (on file-watch events, record changes and a periodic safety tick) and
//! publishes immutable snapshots with the body composed (`cache.rs`); `GET /status`
//! borrows the latest and writes the timestamp. The watchdog (`watchdog.rs`)
//! follows the snapshots for stall, recovery, disk-low and milestones.
//! `lavenderd status --json` computes the same from the files when no daemon runs.

pub mod cache;
mod change;
mod clock;
pub mod compose;
pub mod disk;
pub mod facts;
mod hang_clock;
pub mod health;
#[cfg(target_os = "linux")]
mod inotify;
pub mod refresher;
mod settings;
pub mod stall;
pub mod tasks;
pub mod watch;
pub mod watchdog;

pub use cache::{StatusCache, StatusSnapshot};
pub use compose::compose;
pub use facts::FileFacts;
pub use refresher::RefreshOptions;
pub use settings::StatusSettings;

use crate::layout::Layout;
use lavender::pipeline_file::PipelineRecord;

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
