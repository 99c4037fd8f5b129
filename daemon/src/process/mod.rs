//! Worker processes: spawning them in their own session, recognising them again
//! after a daemon restart (pid + start time), signalling their process group.

pub mod identity;
pub mod signal;
pub mod spawn;

pub use identity::ProcessIdentity;
pub use spawn::{ExitOutcome, SpawnSpec, Spawned};
