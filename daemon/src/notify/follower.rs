//! Tails a run's `events.jsonl` from the persisted offset and pushes each new
//! milestone once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lavender::events;

use super::format::milestone;
use super::notifier::Notifier;
use super::offsets;

pub struct EventFollower {
    notifier: Notifier,
    offsets_path: PathBuf,
    offsets: BTreeMap<PathBuf, u64>,
}

impl EventFollower {
    /// Loads the offsets saved in `<state_dir>/notify-offsets.json`.
    pub fn new(notifier: &Notifier, state_dir: &Path) -> EventFollower {
        let offsets_path = offsets::path(state_dir);
        EventFollower {
            notifier: notifier.clone(),
            offsets: offsets::load(&offsets_path),
            offsets_path,
        }
    }

    /// Where the next poll of `run_dir` starts reading.
    pub fn offset(&self, run_dir: &Path) -> u64 {
        self.offsets
            .get(&events::path(run_dir))
            .copied()
            .unwrap_or(0)
    }

    /// Saves the new offset, then queues a push for each event appended since the
    /// last poll; returns how many pushes were queued. A run without an event log
    /// yet is not an error. Call it on a file-watch event or a timer.
    pub fn poll(&mut self, run_dir: &Path) -> lavender::Result<usize> {
        let path = events::path(run_dir);
        let offset = self.offsets.get(&path).copied().unwrap_or(0);
        let batch = match events::read_from(&path, offset) {
            Ok(batch) => batch,
            Err(e) if e.is_not_found() => return Ok(0),
            Err(e) => return Err(e),
        };
        if batch.skipped > 0 {
            tracing::warn!(
                "notify: skipped {} malformed line(s) in {}",
                batch.skipped,
                path.display()
            );
        }
        let pushes: Vec<_> = batch
            .events
            .iter()
            .filter_map(|event| milestone(event, self.notifier.prefix()))
            .collect();
        // The offset is saved before the pushes are queued: a daemon killed after a
        // push went out must not send it again when it restarts. (Pushes still in
        // the queue at a kill are lost either way.)
        if batch.next_offset != offset || !self.offsets.contains_key(&path) {
            self.offsets.insert(path, batch.next_offset);
            offsets::save(&self.offsets_path, &mut self.offsets)?;
        }
        let queued = pushes.len();
        for n in pushes {
            self.notifier.send(n);
        }
        Ok(queued)
    }
}
