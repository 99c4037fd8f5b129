//! Tails a run's `events.jsonl` from the persisted offset and pushes each new
//! milestone once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lavender::events;

use super::format::milestone;
use super::notifier::Notifier;
use super::offsets;
use crate::layout::Layout;

pub struct EventFollower {
    notifier: Notifier,
    /// The offsets file's keys are relative to its data root.
    layout: Layout,
    offsets_path: PathBuf,
    offsets: BTreeMap<PathBuf, u64>,
}

impl EventFollower {
    /// Loads the offsets saved in `<state_dir>/notify-offsets.json` for the runs
    /// under `data_root`.
    pub fn new(notifier: &Notifier, state_dir: &Path, data_root: &Path) -> EventFollower {
        let layout = Layout::new(data_root.to_path_buf(), Some(state_dir.to_path_buf()));
        let offsets_path = offsets::path(state_dir);
        EventFollower {
            notifier: notifier.clone(),
            offsets: offsets::load(&offsets_path, &layout),
            layout,
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

    /// Queues a push for each event appended since the last poll, then saves the
    /// new offset; returns how many pushes were queued. A run without an event log
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
        let mut queued = 0;
        for event in &batch.events {
            if let Some(n) = milestone(event, self.notifier.prefix()) {
                self.notifier.send(n);
                queued += 1;
            }
        }
        if batch.next_offset != offset || !self.offsets.contains_key(&path) {
            self.offsets.insert(path, batch.next_offset);
            offsets::save(&self.offsets_path, &self.layout, &mut self.offsets)?;
        }
        Ok(queued)
    }
}
