//! The status contract. One writer: the refresher (`refresher.rs`) reads what the
//! files say (on file-watch events, record changes and a periodic safety tick) and
//! publishes immutable snapshots with the body composed (`cache.rs`); `GET /status`
//! borrows the latest and writes the timestamp. The watchdog (`watchdog.rs`)
//! follows the snapshots for stall, recovery, disk-low and milestones; the replay
//! watcher (`replay.rs`) for the steps a resumed worker trains again.
//! The composition itself is the core's (`lavender::compose`, with `lavender::stall`):
//! `lavenderd status --json` composes the same from the files when no daemon runs.

pub mod cache;
mod change;
mod clock;
mod hang_clock;
pub mod health;
#[cfg(all(target_os = "linux", not(feature = "bench-notify-watcher")))]
mod inotify;
pub mod refresher;
pub mod replay;
pub mod tasks;
pub mod watch;
pub mod watchdog;

pub use cache::{StatusCache, StatusSnapshot};
pub use refresher::RefreshOptions;
