//! A checkpoint's life after its save, in one room. The contract:
//! - One task follows the supervised run ([`lifecycle`]), told by the status
//!   refresher's change stream, never by the web feed; it reads the run's events itself.
//! - Per save, in this order only ([`order`]): read back → record the verdict →
//!   retention → hand to replication, which uploads only what has a good verdict.
//! - A storage error is not damage: it stops the pass before retention, and is read
//!   again after a backoff; nothing is set aside or deleted for it.
//! - Observe mode reads back and records; it deletes nothing, it says what it would have.
//! - Everything else reads what the room recorded: the verdict files
//!   (`lavender::checkpoint::verdicts`, [`inventory`]) and [`lifecycle::Report`].
//!
//! Behind its interface, for the pipeline: the disk foresight's early retention
//! ([`retain::early`], the same rule one save ahead) and [`retain::inside`]. The
//! resume's own check (`pipeline/actor/damaged.rs`, `fallback::resolve`) reuses a
//! verdict the room recorded while its files are unchanged.

#[cfg(test)]
mod fixture;
pub mod inventory;
pub mod lifecycle;
pub mod order;
pub mod retain;
pub mod verify;

pub use lifecycle::Lifecycle;
pub use retain::{Retention, RetentionHandle};
