//! Launching workers. `backend` chooses between a local process group (spawning it
//! in its own session, recognising it again after a daemon restart by pid + start
//! time, signalling its group, ending its whole generation: `generation`) and a
//! Slurm batch job (`slurm`).

pub(crate) mod backend;
pub(crate) mod cgroup;
#[cfg(test)]
pub mod fake;
pub(crate) mod generation;
pub(crate) mod identity;
pub(crate) mod signal;
pub(crate) mod slurm;
pub(crate) mod spawn;
pub(crate) mod spec;

// Crate-private so rustc reports what nothing uses.
pub(crate) use crate::exit::ExitFuture;
pub(crate) use backend::{Backend, Launched, WorkerHandle};
pub(crate) use identity::{Alive, ProcessIdentity};
pub(crate) use slurm::JobUpdate;
pub(crate) use spec::SpawnSpec;
