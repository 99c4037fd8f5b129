//! The refresher: the one task that reads the files the status is made of. It
//! re-reads them when the run directory changes (file events; the heartbeat is
//! replaced by rename, so the directory is watched), when the pipeline record or
//! the settings change, and on a periodic safety tick; a change to the heartbeat
//! alone re-reads the heartbeat alone. It composes again (without reading) when
//! the notification counts change, the event log grows (the feed follows it after
//! each snapshot) or a time-dependent value is due (see `cache.rs`). Each result
//! is published as a new immutable snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::cache::{StatusCache, StatusSnapshot};
use super::change::Change;
use super::clock::{Clock, SystemClock};
use super::hang_clock::HangClock;
use super::watch::{RunDirWatcher, WatchOptions};
use crate::pipeline::PipelineHandle;
use crate::push::{ChannelCounts, Notifier};
use crate::replicate::Replication;
use lavender::compose::{FileFacts, StatusSettings};
use lavender::layout::Layout;
use lavender::pipeline_file::PipelineRecord;

/// How long a disk reading is reused.
const DISK_READING: Duration = Duration::from_secs(2);
/// File events within this window are handled by one refresh (a save or a fast
/// worker's heartbeats come in bursts).
const COALESCE: Duration = Duration::from_millis(50);

/// The refresher's timings and watcher, injectable (`serve`'s hidden options).
#[derive(Debug, Clone)]
pub struct RefreshOptions {
    /// The periodic safety tick: files are read again even without an event.
    pub safety_refresh: Duration,
    /// See [`WatchOptions::simulate_exhausted`].
    pub simulate_inotify_exhausted: bool,
}

impl Default for RefreshOptions {
    fn default() -> RefreshOptions {
        RefreshOptions {
            safety_refresh: Duration::from_secs(2),
            simulate_inotify_exhausted: false,
        }
    }
}

/// Reads the files once, publishes the first snapshot and starts the refresher.
/// `notifier`: whose counts the status shows; `replication`: whose state it shows.
pub fn spawn(
    layout: Layout,
    pipeline: &PipelineHandle,
    settings: StatusSettings,
    watch: WatchOptions,
    opts: RefreshOptions,
    notifier: Option<Notifier>,
    replication: Option<Replication>,
) -> StatusCache {
    let records = pipeline.subscribe();
    let record = records.borrow().clone();
    // The run directory's watch goes in place before the first read, so a file
    // written in between raises an event.
    let (tx, events) = mpsc::unbounded_channel();
    let mut watcher = RunDirWatcher::new(
        &WatchOptions {
            simulate_exhausted: watch.simulate_exhausted || opts.simulate_inotify_exhausted,
            ..watch
        },
        tx,
    );
    watch_run_dir(
        &mut watcher,
        FileFacts::run_dir_for(&layout, &record).as_deref(),
    );
    let disk = crate::filesystem::read(&layout.data_root);
    let mut facts = FileFacts::read(&layout, &record, &settings, Some(disk));
    let clock: Box<dyn Clock> = Box::new(SystemClock);
    let mut hangs = HangClock::default();
    date_what_was_said(&mut hangs, clock.as_ref(), &record, &mut facts);
    let counts = counts(notifier.as_ref());
    let first = StatusSnapshot::compose(
        record,
        facts,
        settings.clone(),
        counts,
        lavender::time::now_utc(),
    )
    .with_replication(replication.as_ref().map(Replication::status));
    let (snapshots, snapshots_rx) = watch::channel(Arc::new(first));
    let settings = Arc::new(watch::Sender::new(settings));
    let refresher = Refresher {
        layout,
        records,
        settings: settings.subscribe(),
        counted: notifier.as_ref().map(Notifier::subscribe_counts),
        notifier,
        replication,
        snapshots,
        clock,
        hangs,
    };
    tokio::spawn(refresher.run(watcher, events, opts));
    StatusCache::new(snapshots_rx, settings)
}

fn counts(notifier: Option<&Notifier>) -> BTreeMap<String, ChannelCounts> {
    notifier.map(Notifier::counts).unwrap_or_default()
}

struct Refresher {
    layout: Layout,
    records: watch::Receiver<PipelineRecord>,
    settings: watch::Receiver<StatusSettings>,
    notifier: Option<Notifier>,
    /// Shown as `replication`; read at each composition (at least every safety tick).
    replication: Option<Replication>,
    counted: Option<watch::Receiver<()>>,
    snapshots: watch::Sender<Arc<StatusSnapshot>>,
    /// The clocks hang allowances are measured on, and what was said when.
    clock: Box<dyn Clock>,
    hangs: HangClock,
}

/// Dates what the live worker last said on the monotonic clock (`hang_clock.rs`),
/// for the status and the watchdog; says so when a suspend or a wall-clock jump
/// restarted the allowances.
fn date_what_was_said(
    hangs: &mut HangClock,
    clock: &dyn Clock,
    record: &PipelineRecord,
    facts: &mut FileFacts,
) {
    let said = lavender::stall::said_by(
        record.worker(),
        facts.heartbeat.as_ref(),
        facts.step_heartbeat.as_ref(),
    );
    let look = hangs.look(clock.read(), said);
    if let Some(restart) = look.restart {
        tracing::warn!("{restart}");
    }
    facts.said = look.said;
}

/// Why the loop turned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// Read the files again.
    Read,
    /// Read the heartbeat again, keep the other facts. `publish`: publish a snapshot
    /// even when the heartbeat reads as before (the event log grew too).
    ReadHeartbeat {
        publish: bool,
    },
    /// Compose again from the facts at hand.
    Compose,
    Quit,
}

/// The file changes of one burst, folded.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Burst {
    heartbeat: bool,
    events: bool,
    other: bool,
}

impl Burst {
    fn add(mut self, change: Change) -> Burst {
        match change {
            Change::Heartbeat => self.heartbeat = true,
            Change::Events => self.events = true,
            Change::Other => self.other = true,
        }
        self
    }

    /// What the burst asks for: everything read for anything but the heartbeat and
    /// the event log; the heartbeat alone; or a snapshot for the feed.
    fn wake(self) -> Wake {
        if self.other {
            Wake::Read
        } else if self.heartbeat {
            Wake::ReadHeartbeat {
                publish: self.events,
            }
        } else {
            Wake::Compose
        }
    }
}

/// `wake`, unless the record or the settings changed meanwhile (`inputs_changed`):
/// the loop marks them seen whatever woke it, so a wake that reads less than
/// everything would drop their read (a new run's directory, say) until the tick.
fn read_all_if(inputs_changed: bool, wake: Wake) -> Wake {
    match wake {
        Wake::ReadHeartbeat { .. } | Wake::Compose if inputs_changed => Wake::Read,
        wake => wake,
    }
}

async fn changed_opt(rx: Option<&mut watch::Receiver<()>>) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

impl Refresher {
    async fn run(
        mut self,
        mut watcher: RunDirWatcher,
        mut events: mpsc::UnboundedReceiver<Change>,
        opts: RefreshOptions,
    ) {
        let mut tick = tokio::time::interval(opts.safety_refresh);
        tick.tick().await;
        let mut facts = self.snapshots.borrow().facts.clone();
        let mut refreshed_at = Instant::now();
        let mut events_mark = 0u64;
        loop {
            let expires = self.snapshots.borrow().expires_at();
            let wake = tokio::select! {
                Some(change) = events.recv() => {
                    // The first change of a quiet spell is read at once (a heartbeat
                    // shows in the status within milliseconds); a burst (a checkpoint
                    // save, a fast worker's heartbeats) is read at most once per COALESCE.
                    let next = refreshed_at + COALESCE;
                    if Instant::now() < next {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
                    }
                    let mut burst = Burst::default().add(change);
                    while let Ok(change) = events.try_recv() {
                        burst = burst.add(change);
                    }
                    events_mark += u64::from(burst.events);
                    burst.wake()
                }
                changed = self.records.changed() => if changed.is_ok() { Wake::Read } else { Wake::Quit },
                changed = self.settings.changed() => if changed.is_ok() { Wake::Read } else { Wake::Quit },
                alive = changed_opt(self.counted.as_mut()) => if alive { Wake::Compose } else { Wake::Quit },
                _ = tick.tick() => Wake::Read,
                _ = sleep_until_utc(expires) => Wake::Compose,
            };
            let inputs_changed = self.records.has_changed().unwrap_or(false)
                || self.settings.has_changed().unwrap_or(false);
            let wake = read_all_if(inputs_changed, wake);
            let record = self.records.borrow_and_update().clone();
            let settings = self.settings.borrow_and_update().clone();
            match wake {
                Wake::Quit => return,
                Wake::Compose => {}
                Wake::Read => {
                    events_mark += 1;
                    let run_dir = FileFacts::run_dir_for(&self.layout, &record);
                    watch_run_dir(&mut watcher, run_dir.as_deref());
                    let reuse_disk = facts
                        .disk_read_at
                        .is_some_and(|t| t.elapsed() < DISK_READING);
                    let disk =
                        (!reuse_disk).then(|| crate::filesystem::read(&self.layout.data_root));
                    let read = FileFacts::read(&self.layout, &record, &settings, disk);
                    facts = if reuse_disk {
                        read.with_disk_of(&facts)
                    } else {
                        read.with_trend_of(&facts)
                    };
                    refreshed_at = Instant::now();
                }
                Wake::ReadHeartbeat { publish } => {
                    let before = facts.heartbeat.clone();
                    facts = facts.with_heartbeat_read();
                    refreshed_at = Instant::now();
                    // One replacement can come as several events (the writer closes
                    // the file after its rename): the same heartbeat again is no
                    // news, and each snapshot wakes the feed and the watchdog.
                    if facts.heartbeat == before && !publish {
                        continue;
                    }
                }
            }
            if let Some(rx) = self.counted.as_mut() {
                rx.borrow_and_update();
            }
            date_what_was_said(&mut self.hangs, self.clock.as_ref(), &record, &mut facts);
            let mut snapshot = StatusSnapshot::compose(
                record,
                facts.clone(),
                settings,
                counts(self.notifier.as_ref()),
                lavender::time::now_utc(),
            )
            .with_replication(self.replication.as_ref().map(Replication::status));
            snapshot.events_mark = events_mark;
            self.snapshots.send_replace(Arc::new(snapshot));
        }
    }
}

/// Follows the run directory the status is about (once it exists).
fn watch_run_dir(watcher: &mut RunDirWatcher, run_dir: Option<&std::path::Path>) {
    if run_dir.is_none_or(|d| d.is_dir()) {
        watcher.watch(run_dir);
    }
}

/// Sleeps until just past `at` (wall clock); forever for `None`.
async fn sleep_until_utc(at: Option<chrono::DateTime<chrono::Utc>>) {
    let Some(at) = at else {
        return std::future::pending().await;
    };
    let wait = (at - lavender::time::now_utc())
        .to_std()
        .unwrap_or_default();
    // A millisecond past the boundary, so composing then sees the new value.
    tokio::time::sleep(wait + Duration::from_millis(1)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burst(changes: &[Change]) -> Burst {
        changes.iter().fold(Burst::default(), |b, c| b.add(*c))
    }

    #[test]
    fn a_heartbeat_alone_reads_the_heartbeat_alone() {
        use Change::*;
        let heartbeat_only = Wake::ReadHeartbeat { publish: false };
        assert_eq!(burst(&[Heartbeat]).wake(), heartbeat_only);
        assert_eq!(burst(&[Heartbeat, Heartbeat]).wake(), heartbeat_only);
        assert_eq!(
            burst(&[Events, Heartbeat]).wake(),
            Wake::ReadHeartbeat { publish: true }
        );
        assert_eq!(burst(&[Events]).wake(), Wake::Compose);
        assert_eq!(burst(&[Heartbeat, Other, Events]).wake(), Wake::Read);
        assert_eq!(burst(&[Other]).wake(), Wake::Read);
    }

    #[test]
    fn a_record_or_settings_change_is_always_read_in_full() {
        let heartbeat = Wake::ReadHeartbeat { publish: false };
        for wake in [heartbeat, Wake::Compose, Wake::Read] {
            assert_eq!(read_all_if(true, wake), Wake::Read);
            assert_eq!(read_all_if(false, wake), wake);
        }
        assert_eq!(read_all_if(true, Wake::Quit), Wake::Quit);
    }
}
