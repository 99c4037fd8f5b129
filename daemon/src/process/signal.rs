//! Signals to a worker's whole process group (the worker is its session and group
//! leader, so pgid == pid), only after checking it is still the same process, and to
//! every other process of its generation (a rank in a session of its own).

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{Alive, ProcessIdentity};

/// Sends `signal` to the group led by `worker`. Returns false when the worker is
/// already gone (or its pid now belongs to another process, which is left alone).
pub fn signal_group(worker: &ProcessIdentity, signal: Signal) -> bool {
    if !worker.is_alive() {
        return false;
    }
    signal_generation(worker, signal);
    let Ok(raw) = i32::try_from(worker.pid) else {
        return false;
    };
    match killpg(Pid::from_raw(raw), signal) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(pid = worker.pid, %signal, error = %e, "could not signal the worker's process group");
            false
        }
    }
}

/// [`signal_group`] for a child we spawned and have not yet reaped completely
/// (see [`signal_pgid`]).
pub fn signal_own_group(worker: &ProcessIdentity, signal: Signal) -> bool {
    signal_generation(worker, signal);
    signal_pgid(worker.pid, signal)
}

/// Sends `signal` to the process group `pgid` of a child we spawned and have not
/// yet reaped completely. While any member lives the kernel does not hand out that
/// number as a new pid, so no identity check is needed, and this still reaches
/// members that outlive the leader (data loaders, helpers).
pub fn signal_pgid(pgid: u32, signal: Signal) -> bool {
    let Ok(raw) = i32::try_from(pgid) else {
        return false;
    };
    killpg(Pid::from_raw(raw), signal).is_ok()
}

/// The generation's processes outside the worker's group hear the signal too: a
/// torchrun rank gets a SIGTERM from its launcher and one from us, which agree.
fn signal_generation(worker: &ProcessIdentity, signal: Signal) {
    if let Some(token) = &worker.generation {
        super::generation::signal_members(token, worker, signal);
    }
}
