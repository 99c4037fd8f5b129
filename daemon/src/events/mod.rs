//! The one follower of each run's `events.jsonl` and its offsets: what it reads goes
//! to the live feed, the daemon's checkpoint retention and the milestone pushes.
//!
//! ```text
//! EventFollower::new(Some(&notifier), &state_dir, &data_root) // push offsets from <state_dir>/notify-offsets.json
//!     .with_retention(retention)                             // also tells the daemon's retention (retention.rs)
//! follower.poll(&run_dir) -> Result<Followed { events, pushed }>  // new events for the feed; persists
//!                                                            // the push offset, pushes new milestones
//! ```

mod follower;
mod offsets;

pub use follower::{EventFollower, Followed};
