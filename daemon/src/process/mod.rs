//! Launching workers. `backend` chooses between a local process group (spawning it
//! in its own session, recognising it again after a daemon restart by pid + start
//! time, signalling its group) and a Slurm batch job (`slurm`).

pub(crate) mod backend;
pub(crate) mod exit;
#[cfg(test)]
pub mod fake;
pub(crate) mod identity;
pub(crate) mod locate;
pub(crate) mod signal;
pub(crate) mod slurm;
pub(crate) mod spawn;
pub(crate) mod spec;

pub use backend::{Backend, JobUpdate, Launched, WorkerHandle};
pub use exit::ExitOutcome;
pub use identity::ProcessIdentity;
pub use spawn::Spawned;
pub use spec::SpawnSpec;
