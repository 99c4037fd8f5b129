//! The status tasks' own thread. The refresher (with the run directory's watcher),
//! the watchdog and the feed's publisher run on a single-threaded runtime of their
//! own. All three wake for each heartbeat (a file event, then a snapshot they all
//! follow): on one thread that is one wake-up in turn, where the daemon's runtime
//! of two workers also woke its idle worker to share out a few microseconds of
//! work. Their file reads, on a disk that hangs, hold up neither the API nor the
//! pipeline actor.

use tokio::runtime::{Builder, Handle};

pub struct StatusTasks {
    handle: Handle,
}

impl StatusTasks {
    /// Starts the thread; it runs until the process exits.
    pub fn start() -> std::io::Result<StatusTasks> {
        let runtime = Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("status-tasks".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
        Ok(StatusTasks { handle })
    }

    /// Calls `spawn` with this runtime current: the tasks it spawns run here.
    pub fn enter<R>(&self, spawn: impl FnOnce() -> R) -> R {
        let _current = self.handle.enter();
        spawn()
    }
}
