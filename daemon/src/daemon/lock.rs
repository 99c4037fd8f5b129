//! One daemon per state directory: an exclusive flock on `state/lavenderd.pid`,
//! which also records the holder's pid for the refusal message.

use std::fs::File;
use std::io::{Read, Seek, Write};

use anyhow::{Context, Result, bail};
use nix::fcntl::{Flock, FlockArg};

use lavender::layout::Layout;

pub struct InstanceLock {
    _lock: Flock<File>,
}

pub fn acquire(layout: &Layout) -> Result<InstanceLock> {
    let path = layout.lock();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            lock.set_len(0)?;
            lock.rewind()?;
            write!(lock, "{}", std::process::id())?;
            lock.sync_all()?;
            Ok(InstanceLock { _lock: lock })
        }
        Err((mut file, _)) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let pid = text.trim();
            bail!(
                "another lavenderd (pid {}) is already running on state directory {}; stop it first (lavenderd stop, or kill {})",
                if pid.is_empty() { "unknown" } else { pid },
                layout.state_dir.display(),
                if pid.is_empty() { "<pid>" } else { pid }
            )
        }
    }
}

/// The pid of the daemon holding the lock, if one does.
pub fn holder(layout: &Layout) -> Option<u32> {
    let file = File::open(layout.lock()).ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_) => None,
        Err((_, _)) => std::fs::read_to_string(layout.lock())
            .ok()?
            .trim()
            .parse()
            .ok(),
    }
}
