//! The live feed behind `GET /events`: a bounded ring of numbered items (state
//! changes, heartbeats, milestones from `events.jsonl`, alerts) that streams
//! replay from, so a reconnecting client resumes where it left off.

pub mod alerts;
pub mod bus;
pub mod item;
pub mod publisher;
pub mod snapshot;

pub use bus::{Feed, FeedItem, Replay};
pub use item::Kind;
pub use snapshot::Snapshot;
