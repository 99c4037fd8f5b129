//! The status cache. A refresher task re-reads the (few) files the status needs
//! when the run directory changes (notify; the heartbeat is replaced by rename, so
//! the directory is watched), when the pipeline record changes, and on a periodic
//! tick as a safety net. `GET /status` only serializes the cached facts, so its
//! cost does not grow with the number of files in the data root.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use lavender::config::Watcher as WatcherKind;
use lavender::status::Status;
use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use super::{FileFacts, StatusSettings, compose};
use crate::layout::Layout;
use crate::pipeline::alert::AlertSender;
use crate::pipeline::{Alert, PipelineHandle, PipelineRecord};

/// The periodic refresh; also how long a disk reading is reused.
const SAFETY_REFRESH: Duration = Duration::from_secs(2);
/// File events within this window are handled by one refresh (a save or a fast
/// worker's heartbeats come in bursts).
const COALESCE: Duration = Duration::from_millis(50);

#[derive(Clone)]
pub struct StatusCache {
    facts: Arc<RwLock<FileFacts>>,
    settings: Arc<RwLock<StatusSettings>>,
    pipeline: PipelineHandle,
    layout: Layout,
    /// Record changes not yet reflected in `facts`.
    unseen: Arc<Mutex<watch::Receiver<PipelineRecord>>>,
    /// Bumped after every refresh, for the live feed.
    refreshes: Arc<watch::Sender<u64>>,
}

impl StatusCache {
    pub fn status(&self) -> Status {
        // A transition (a step ended, a stop finished) refreshes before answering, so
        // a status read right after `stop` returns already shows what the stop saved.
        {
            let mut unseen = self.unseen.lock().unwrap_or_else(|e| e.into_inner());
            if unseen.has_changed().unwrap_or(false) {
                let record = unseen.borrow_and_update().clone();
                refresh(&self.layout, self, &record);
            }
        }
        let record = self.pipeline.record();
        let facts = self.facts.read().unwrap_or_else(|e| e.into_inner());
        let settings = self.settings.read().unwrap_or_else(|e| e.into_inner());
        compose(&record, &facts, &settings, lavender::time::now_utc(), true)
    }

    /// Changes after every refresh of the cached facts.
    pub fn subscribe_refreshes(&self) -> watch::Receiver<u64> {
        self.refreshes.subscribe()
    }

    pub fn set_settings(&self, settings: StatusSettings) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = settings;
    }
}

pub struct WatchOptions {
    pub kind: WatcherKind,
    pub poll_interval: Duration,
}

/// Starts the refresher and returns the cache it keeps current.
pub fn spawn(
    layout: Layout,
    pipeline: PipelineHandle,
    settings: StatusSettings,
    watch: WatchOptions,
    alerts: AlertSender,
) -> StatusCache {
    let record = pipeline.record();
    let facts = FileFacts::read(&layout, &record, &settings, true);
    let cache = StatusCache {
        facts: Arc::new(RwLock::new(facts)),
        settings: Arc::new(RwLock::new(settings)),
        unseen: Arc::new(Mutex::new(pipeline.subscribe())),
        refreshes: Arc::new(watch::Sender::new(0)),
        pipeline,
        layout: layout.clone(),
    };
    tokio::spawn(refresher(layout, cache.clone(), watch, alerts));
    cache
}

fn make_watcher(
    opts: &WatchOptions,
    tx: mpsc::UnboundedSender<()>,
) -> notify::Result<Box<dyn Watcher + Send>> {
    let handler = move |res: notify::Result<notify::Event>| {
        if res.is_ok() {
            let _ = tx.send(());
        }
    };
    Ok(match opts.kind {
        WatcherKind::Native => Box::new(notify::recommended_watcher(handler)?),
        WatcherKind::Poll => Box::new(notify::PollWatcher::new(
            handler,
            notify::Config::default().with_poll_interval(opts.poll_interval),
        )?),
    })
}

async fn refresher(layout: Layout, cache: StatusCache, opts: WatchOptions, alerts: AlertSender) {
    let (tx, mut events) = mpsc::unbounded_channel();
    let mut watcher = match make_watcher(&opts, tx) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "file watching unavailable; status refreshes every {:?} only", SAFETY_REFRESH);
            None
        }
    };
    let mut watched: Option<PathBuf> = None;
    let mut records = cache.pipeline.subscribe();
    let mut tick = tokio::time::interval(SAFETY_REFRESH);
    let mut stale_alerted = false;
    loop {
        let record: PipelineRecord = records.borrow_and_update().clone();
        let run_dir = FileFacts::run_dir_for(&layout, &record);
        if let Some(w) = watcher.as_mut()
            && run_dir != watched
            && run_dir.as_ref().is_none_or(|d| d.is_dir())
        {
            if let Some(old) = watched.take() {
                let _ = w.unwatch(&old);
            }
            if let Some(dir) = &run_dir {
                match w.watch(dir, RecursiveMode::NonRecursive) {
                    Ok(()) => watched = Some(dir.clone()),
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the run directory")
                    }
                }
            }
        }
        refresh(&layout, &cache, &record);

        let status = cache.status();
        if status.training.heartbeat_stale && !stale_alerted {
            let _ = alerts.send(Alert::Stale {
                step: status.active_step.clone().unwrap_or_default(),
                age_s: status.training.heartbeat_age_s,
            });
        }
        stale_alerted = status.training.heartbeat_stale;

        tokio::select! {
            Some(()) = events.recv() => {
                // Coalesce a burst (a checkpoint save touches several entries).
                tokio::time::sleep(COALESCE).await;
                while events.try_recv().is_ok() {}
            }
            changed = records.changed() => if changed.is_err() { return },
            _ = tick.tick() => {}
        }
    }
}

fn refresh(layout: &Layout, cache: &StatusCache, record: &PipelineRecord) {
    let settings = cache
        .settings
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let previous_disk = {
        let facts = cache.facts.read().unwrap_or_else(|e| e.into_inner());
        facts
            .disk_read_at
            .filter(|t| t.elapsed() < SAFETY_REFRESH)
            .map(|t| (facts.disk.clone(), t))
    };
    let mut facts = FileFacts::read(layout, record, &settings, previous_disk.is_none());
    if let Some((disk, at)) = previous_disk {
        facts.disk = disk;
        facts.disk_read_at = Some(at);
    }
    *cache.facts.write().unwrap_or_else(|e| e.into_inner()) = facts;
    cache.refreshes.send_modify(|n| *n = n.wrapping_add(1));
}
