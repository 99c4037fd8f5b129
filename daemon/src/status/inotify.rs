//! `watcher: native` on Linux: inotify, read on the runtime rather than on a thread
//! of its own, and asked only for what changes what the refresher reads: an entry
//! created, removed or renamed, a file closed after writing, the directory itself
//! removed or moved. Opens and reads (the refresher's own reads of the heartbeat
//! among them) and the writes before a close wake nothing: a worker's heartbeat,
//! written to a temporary and renamed into place, wakes the daemon three or four
//! times instead of seven or eight.
//!
//! An append to `events.jsonl` is seen when the writer closes the file, as both of
//! lavender's writers (Rust and Python) do after each line; a writer that keeps it
//! open is followed at the refresher's periodic tick.

use std::io::ErrorKind;
use std::path::Path;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::change::{Change, DirWatch, change_of_entry};

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::CLOSE_WRITE
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// One inotify instance for the watcher's life, the task that reads it, and the
/// watch on the directory followed now.
pub(super) struct InotifyDir {
    watches: Watches,
    watched: Option<WatchDescriptor>,
    reader: JoinHandle<()>,
}

impl InotifyDir {
    /// Fails as the OS does (the instance limit: EMFILE), so the caller can fall
    /// back to polling. Must be called on a tokio runtime.
    pub(super) fn new(tx: mpsc::UnboundedSender<Change>) -> std::io::Result<InotifyDir> {
        let inotify = Inotify::init()?;
        let watches = inotify.watches();
        // SAFETY: `Inotify` owns its descriptor and closes it only when dropped (this
        // code never calls `close`; `Watches` holds the same descriptor open), so it
        // stays open, and the same, for as long as the `AsyncFd` holding it.
        let fd = unsafe { AsyncFd::register(inotify) }?;
        Ok(InotifyDir {
            watches,
            watched: None,
            reader: tokio::spawn(read_changes(fd, tx)),
        })
    }
}

impl DirWatch for InotifyDir {
    fn watch(&mut self, dir: &Path) -> notify::Result<()> {
        self.unwatch(dir);
        let wd = self
            .watches
            .add(dir, mask())
            .map_err(|e| notify::Error::io(e).add_path(dir.to_path_buf()))?;
        self.watched = Some(wd);
        Ok(())
    }

    /// The removed watch's last event (IGNORED) asks for one full read more.
    fn unwatch(&mut self, _dir: &Path) {
        if let Some(wd) = self.watched.take() {
            let _ = self.watches.remove(wd);
        }
    }
}

impl Drop for InotifyDir {
    fn drop(&mut self) {
        // The task holds the instance: ending it closes the descriptor.
        self.reader.abort();
    }
}

/// Sends what each batch of events asks for, each kind of change once per batch.
async fn read_changes(mut fd: AsyncFd<Inotify>, tx: mpsc::UnboundedSender<Change>) {
    let mut buffer = [0u8; 4096];
    loop {
        let Ok(mut ready) = fd.readable_mut().await else {
            let _ = tx.send(Change::Other);
            return;
        };
        let mut seen = [false; 3];
        match ready.get_inner_mut().read_events(&mut buffer) {
            Ok(events) => {
                for event in events {
                    if let Some(change) = change_of_event(event.mask, event.name) {
                        seen[change as usize] = true;
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                ready.clear_ready();
                continue;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("reading the run directory's file events failed: {e}");
                let _ = tx.send(Change::Other);
                return;
            }
        }
        for change in [Change::Events, Change::Heartbeat, Change::Other] {
            if seen[change as usize] && tx.send(change).is_err() {
                return;
            }
        }
    }
}

/// What one inotify event asks for.
fn change_of_event(mask: EventMask, name: Option<&std::ffi::OsStr>) -> Option<Change> {
    // Events were lost (the queue overflowed), or the directory itself went: the
    // full read finds out what remains.
    if mask.intersects(
        EventMask::Q_OVERFLOW | EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED,
    ) {
        return Some(Change::Other);
    }
    match name {
        Some(name) => change_of_entry(name),
        None => Some(Change::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn lost_events_and_the_directory_itself_ask_for_a_full_read() {
        for mask in [
            EventMask::Q_OVERFLOW,
            EventMask::DELETE_SELF,
            EventMask::MOVE_SELF,
            EventMask::IGNORED,
        ] {
            assert_eq!(change_of_event(mask, None), Some(Change::Other), "{mask:?}");
        }
        let name = |n: &'static str| Some(OsStr::new(n));
        assert_eq!(
            change_of_event(EventMask::MOVED_TO, name("heartbeat.json")),
            Some(Change::Heartbeat)
        );
        assert_eq!(
            change_of_event(EventMask::CLOSE_WRITE, name("events.jsonl")),
            Some(Change::Events)
        );
        assert_eq!(
            change_of_event(EventMask::CREATE, name(".tmp-heartbeat.json-1")),
            None
        );
        assert_eq!(
            change_of_event(EventMask::MOVED_TO | EventMask::ISDIR, name("ckpt-1")),
            Some(Change::Other)
        );
    }
}
