//! The launch backend (`launch.backend`): how a step is started, signalled, checked
//! for life and waited for. `local` runs it as a process group here; `slurm` submits
//! it as a batch job. Everything above (the pipeline actor, status, alerts) works
//! with a [`WorkerHandle`] and does not care which.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use lavender::config::{LaunchBackend, LaunchConfig, SlurmConfig};
use nix::sys::signal::Signal;

use super::identity::Alive;
use super::slurm::{self, JobUpdates};
use super::{ProcessIdentity, SpawnSpec};
use crate::exit::{ExitFuture, ExitOutcome};

pub use lavender::pipeline_file::WorkerHandle;

impl Alive for WorkerHandle {
    /// True while the step lives: the same process, or a Slurm job that has not
    /// ended (pending, running, requeued and pending again all count).
    fn is_alive(&self) -> bool {
        match self {
            WorkerHandle::Local(id) => id.is_alive(),
            WorkerHandle::Slurm { slurm } => slurm::query::job_alive(&slurm.job_id),
        }
    }
}

/// Sends `signal` to the step. `own_child`: a local group we spawned and have not
/// reaped yet (no identity check needed). Returns false when nothing was signalled.
pub fn signal_worker(handle: &WorkerHandle, signal: Signal, own_child: bool) -> bool {
    match handle {
        WorkerHandle::Local(id) if own_child => super::signal::signal_own_group(id, signal),
        WorkerHandle::Local(id) => super::signal::signal_group(id, signal),
        WorkerHandle::Slurm { slurm } => slurm::control::signal(&slurm.job_id, signal),
    }
}

/// A re-adopted worker that has ended is still our child when this daemon restarted
/// alone (it re-executed in place): reap it, which also tells how it ended. Not our
/// child (the previous daemon died): only its absence is known.
fn reap(pid: u32) -> ExitOutcome {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let Ok(raw) = i32::try_from(pid) else {
        return ExitOutcome::Unknown;
    };
    match waitpid(nix::unistd::Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => ExitOutcome::Code(code),
        Ok(WaitStatus::Signaled(_, signal, _)) => ExitOutcome::Signal(signal as i32),
        _ => ExitOutcome::Unknown,
    }
}

/// Kills and reaps what is left of a local worker's generation (see
/// `generation.rs`); a worker recorded before generations existed has only its group.
async fn end_generation(worker: &ProcessIdentity) {
    if let Some(token) = &worker.generation {
        super::generation::end(token, worker, super::generation::END_DEADLINE).await;
    }
}

/// A launched step: how to find it again, and a future that resolves when it ends.
pub struct Launched {
    pub handle: WorkerHandle,
    pub exit: ExitFuture,
}

/// Where the daemon keeps the batch scripts and stop marks of Slurm jobs.
#[derive(Debug, Clone)]
pub struct Backend {
    kind: LaunchBackend,
    slurm: SlurmConfig,
    jobs_dir: PathBuf,
    /// Unit tests of the pipeline actor: workers that are not processes.
    #[cfg(test)]
    fake: Option<super::fake::FakeBackend>,
}

impl Backend {
    /// `jobs_dir`: the daemon's own directory for batch scripts (it must be visible
    /// on the compute nodes only through the log and run directories, not this one).
    pub fn from_config(launch: &LaunchConfig, jobs_dir: PathBuf) -> Backend {
        Backend {
            kind: launch.backend,
            slurm: launch.slurm.clone(),
            jobs_dir,
            #[cfg(test)]
            fake: None,
        }
    }

    /// A backend whose workers are driven by the test through `fake`.
    #[cfg(test)]
    pub fn fake(fake: super::fake::FakeBackend) -> Backend {
        Backend {
            fake: Some(fake),
            ..Backend::from_config(&LaunchConfig::default(), PathBuf::new())
        }
    }

    /// Sends `signal` to a worker (see [`WorkerHandle::signal`]) without waiting:
    /// a local group at once, a Slurm job through `scontrol` and `scancel` on the
    /// blocking pool, which say themselves when they fail.
    pub fn signal(&self, handle: &WorkerHandle, signal: Signal, own_child: bool) {
        #[cfg(test)]
        if let Some(fake) = &self.fake {
            fake.signal(handle, signal);
            return;
        }
        match handle {
            WorkerHandle::Local(_) => {
                signal_worker(handle, signal, own_child);
            }
            WorkerHandle::Slurm { .. } => {
                let handle = handle.clone();
                tokio::task::spawn_blocking(move || signal_worker(&handle, signal, own_child));
            }
        }
    }

    /// Starts a step. `updates` hears of a Slurm job's state changes.
    pub fn launch(&self, spec: &SpawnSpec, updates: JobUpdates) -> Result<Launched> {
        #[cfg(test)]
        if let Some(fake) = &self.fake {
            return fake.launch(spec.step);
        }
        let mut spec = spec.clone();
        if let Some(program) = spec.command.first_mut() {
            *program = crate::locate::worker_program_here(program)?;
        }
        let spec = &spec;
        match self.kind {
            LaunchBackend::Local => {
                let spawned = super::spawn::spawn(spec)?;
                let identity = spawned.identity.clone();
                let child = spawned.child;
                let story = spawned.story;
                let exit = Box::pin(async move {
                    let outcome = super::spawn::wait(child, &identity).await;
                    // Whatever the worker left in its group (a stuck data loader, a helper
                    // ignoring SIGTERM) goes with it, so a restart starts clean.
                    if super::signal::signal_pgid(identity.pid, Signal::SIGKILL) {
                        tracing::warn!(
                            pgid = identity.pid,
                            "killed processes the worker left behind in its group"
                        );
                    }
                    // And so does every process of its generation elsewhere (torchrun's
                    // ranks, each in its own session): the exit is reported, and a
                    // restart launched, only once none of them is left.
                    end_generation(&identity).await;
                    if let Some(story) = story {
                        crate::logs::story::detach(story);
                    }
                    outcome
                });
                Ok(Launched {
                    handle: WorkerHandle::Local(spawned.identity),
                    exit,
                })
            }
            LaunchBackend::Slurm => {
                let job = slurm::submit::submit(&self.slurm, &self.jobs_dir, spec)?;
                let exit = slurm::watch::until_done(
                    job.clone(),
                    self.slurm.on_node_failure,
                    self.poll_interval(),
                    updates,
                );
                Ok(Launched {
                    handle: WorkerHandle::Slurm { slurm: job },
                    exit,
                })
            }
        }
    }

    /// Waits for a step this daemon did not start (re-adopted after a restart).
    /// A local process that is not our child tells only that it is gone; a Slurm
    /// job tells its exit code as long as Slurm remembers it.
    pub fn watch_adopted(
        &self,
        handle: &WorkerHandle,
        poll: Duration,
        updates: JobUpdates,
    ) -> ExitFuture {
        match handle {
            WorkerHandle::Local(id) => {
                let id = id.clone();
                super::generation::become_subreaper();
                // After a restart alone it is still our child, reaped here.
                super::generation::launching().register(id.pid);
                Box::pin(async move {
                    while id.is_alive() {
                        tokio::time::sleep(poll).await;
                    }
                    let outcome = reap(id.pid);
                    super::generation::released(id.pid);
                    end_generation(&id).await;
                    outcome
                })
            }
            WorkerHandle::Slurm { slurm } => slurm::watch::until_done(
                slurm.clone(),
                self.slurm.on_node_failure,
                self.poll_interval(),
                updates,
            ),
        }
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_secs(self.slurm.poll_interval_s.max(1))
    }
}
