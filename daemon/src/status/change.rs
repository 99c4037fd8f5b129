//! What a change in the run directory asks of the status refresher, and what a
//! watcher backend (the OS's events or a poller) offers the watcher.

use std::ffi::OsStr;
use std::path::Path;

use lavender::log_history::{FILE as ARRAY, SIDECAR};

/// What a change in the run directory asks of the refresher, least to most; a burst
/// of changes asks for the largest (`max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// `events.jsonl` grew. The status does not read it, but the feed follows it
    /// after every published snapshot: publish one, or a milestone waits for the
    /// next heartbeat (seconds apart for a real worker).
    Events,
    /// `heartbeat.json` was replaced or removed: read it alone.
    Heartbeat,
    /// Anything else (a checkpoint renamed into place or pruned, an entry not known
    /// here, the directory itself, events lost): read every file.
    Other,
}

/// What a change to the run directory's entry `name` asks for; `None`: nothing the
/// status or the feed reads.
pub(super) fn change_of_entry(name: &OsStr) -> Option<Change> {
    let Some(name) = name.to_str() else {
        return Some(Change::Other);
    };
    match name {
        lavender::heartbeat::FILE => Some(Change::Heartbeat),
        lavender::events::FILE => Some(Change::Events),
        // Appended every step (the history read on request by `/runs/{id}/history`)
        // or at every save (`train.log`, for people): reading the status for them
        // doubled the reads per heartbeat.
        SIDECAR | ARRAY | lavender::trainlog::FILE => None,
        // A checkpoint read back by the verifier: the status counts the verified.
        n if n.starts_with(lavender::checkpoint::verdicts::PREFIX) => Some(Change::Other),
        // Hidden entries are never checkpoints (the listing skips them): temporaries
        // in flight (`.tmp-*`) and staged saves. Their rename into place is the change.
        n if n.starts_with('.') => None,
        _ => Some(Change::Other),
    }
}

/// A backend: the OS's events, or a thread that polls.
pub(super) trait DirWatch: Send {
    fn watch(&mut self, dir: &Path) -> notify::Result<()>;
    fn unwatch(&mut self, dir: &Path);
}
