//! The feed's follower of a run's `events.jsonl`. Each poll reads what was appended
//! and hands it to its two readers: the live feed (every event, from the run's
//! first line on; the caller publishes them) and the notifier (a push per milestone,
//! at most once: its offset is persisted, so a daemon restart sends nothing twice).
//! A checkpoint's life after its save is not here: the checkpoints room reads the
//! events itself (`checkpoints/lifecycle.rs`).
//! The feed and the pushes usually stand at the same offset and share one read;
//! they differ only right after a daemon restart, when the feed catches up on what
//! was pushed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lavender::events::{self, Event, EventBatch};

use super::offsets;
use crate::push::{Notifier, milestone};
use lavender::layout::Layout;

pub struct EventFollower {
    /// Milestone pushes; none when `notify.milestones` is off.
    pushes: Option<Pushes>,
    /// The events file the feed is reading, and how far.
    feed_file: Option<PathBuf>,
    feed_offset: u64,
}

struct Pushes {
    notifier: Notifier,
    /// The offsets file's keys are relative to its data root.
    layout: Layout,
    offsets_path: PathBuf,
    offsets: BTreeMap<PathBuf, u64>,
}

/// What one poll found.
#[derive(Debug, Default)]
pub struct Followed {
    /// Events the feed has not had yet, in file order.
    pub events: Vec<Event>,
    /// Milestone pushes queued.
    pub pushed: usize,
}

impl EventFollower {
    /// A follower that also pushes milestones through `notifier`, from the offsets
    /// saved in `<state_dir>/notify-offsets.json` for the runs under `data_root`.
    pub fn new(notifier: Option<&Notifier>, state_dir: &Path, data_root: &Path) -> EventFollower {
        let offsets_path = offsets::path(state_dir);
        EventFollower {
            pushes: notifier.map(|n| {
                let layout = Layout::new(data_root.to_path_buf(), Some(state_dir.to_path_buf()));
                Pushes {
                    notifier: n.clone(),
                    offsets: offsets::load(&offsets_path, &layout),
                    layout,
                    offsets_path,
                }
            }),
            feed_file: None,
            feed_offset: 0,
        }
    }

    /// Where the next push of `run_dir`'s milestones starts reading.
    pub fn offset(&self, run_dir: &Path) -> u64 {
        self.pushes
            .as_ref()
            .and_then(|p| p.offsets.get(&events::path(run_dir)).copied())
            .unwrap_or(0)
    }

    /// Reads what `run_dir`'s events gained since the last poll: the events new to
    /// the feed, and a push queued per new milestone (its offset saved first). A run
    /// without an event log yet is not an error. Call it on a refresh or a timer.
    pub fn poll(&mut self, run_dir: &Path) -> lavender::Result<Followed> {
        let path = events::path(run_dir);
        if self.feed_file.as_ref() != Some(&path) {
            // A new run: the feed starts from its first line.
            self.feed_file = Some(path.clone());
            self.feed_offset = 0;
        }
        let Some(batch) = read(&path, self.feed_offset)? else {
            return Ok(Followed::default());
        };
        let mut pushed = 0;
        if let Some(p) = self.pushes.as_mut() {
            let offset = p.offsets.get(&path).copied().unwrap_or(0);
            pushed = if offset == self.feed_offset {
                p.push(&path, offset, &batch)?
            } else if let Some(own) = read(&path, offset)? {
                p.push(&path, offset, &own)?
            } else {
                0
            };
        }
        self.feed_offset = batch.next_offset;
        Ok(Followed {
            events: batch.events,
            pushed,
        })
    }
}

impl Pushes {
    /// Saves where the next read starts, then queues the milestones of `batch`
    /// (read from `offset`). Saved first: a daemon killed after a push went out
    /// must not send it again when it restarts. (Pushes still queued at a kill are
    /// lost either way.)
    fn push(&mut self, path: &Path, offset: u64, batch: &EventBatch) -> lavender::Result<usize> {
        let pushes: Vec<_> = batch
            .events
            .iter()
            .filter_map(|event| milestone(event, self.notifier.prefix()))
            .collect();
        if batch.next_offset != offset || !self.offsets.contains_key(path) {
            self.offsets.insert(path.to_path_buf(), batch.next_offset);
            offsets::save(&self.offsets_path, &self.layout, &mut self.offsets)?;
        }
        let queued = pushes.len();
        for n in pushes {
            self.notifier.send(n);
        }
        Ok(queued)
    }
}

/// The complete lines after `offset`; none while the file does not exist.
fn read(path: &Path, offset: u64) -> lavender::Result<Option<EventBatch>> {
    let batch = match events::read_from(path, offset) {
        Ok(batch) => batch,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    if batch.skipped > 0 {
        tracing::warn!(
            "skipped {} malformed line(s) in {}",
            batch.skipped,
            path.display()
        );
    }
    Ok(Some(batch))
}
