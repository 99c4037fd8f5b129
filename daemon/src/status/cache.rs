//! The status cache. A refresher task re-reads the (few) files the status needs
//! when the run directory changes (notify; the heartbeat is replaced by rename, so
//! the directory is watched), when the pipeline record changes, and on a periodic
//! tick as a safety net. `GET /status` only serializes the cached facts, so its
//! cost does not grow with the number of files in the data root.
//!
//! The serialized body is cached too. It is composed again only when its inputs
//! change: a refresh of the facts, a new pipeline record, new notification counts,
//! new settings, or a time-dependent value (the heartbeat's age in whole seconds,
//! the start-up grace). Otherwise a request writes the current timestamp in front of
//! the cached rest of the body, so every answer is what composing it afresh at that
//! instant would give.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use lavender::status::Status;
use tokio::sync::{mpsc, watch};

use super::compose::{in_startup_grace, started_at};
use super::health::HeartbeatWatch;
use super::watch::{RunDirWatcher, WatchOptions};
use super::{FileFacts, StatusSettings, compose};
use crate::layout::Layout;
use crate::notify::{ChannelCounts, EventFollower, Notifier, disk_low_need};
use crate::pipeline::alert::AlertSender;
use crate::pipeline::{Alert, PipelineHandle, PipelineRecord};

/// The periodic refresh; also how long a disk reading is reused.
const SAFETY_REFRESH: Duration = Duration::from_secs(2);
/// File events within this window are handled by one refresh (a save or a fast
/// worker's heartbeats come in bursts).
const COALESCE: Duration = Duration::from_millis(50);
/// Tests set this (milliseconds) to replace [`SAFETY_REFRESH`]'s periodic refresh.
pub const TEST_SAFETY_REFRESH_VAR: &str = "LAVENDER_TEST_SAFETY_REFRESH_MS";

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
    notifier: Option<Notifier>,
    /// The last `GET /status` body and what it was composed from.
    body: Arc<Mutex<BodyCache>>,
}

struct BodyCache {
    /// Its own view of the record: `has_changed` says whether `body` predates it.
    record: watch::Receiver<PipelineRecord>,
    body: Option<CachedBody>,
}

/// A composed body, minus its timestamp, and the inputs it was composed from.
struct CachedBody {
    refresh: u64,
    counts: BTreeMap<String, ChannelCounts>,
    /// The time-dependent inputs at composition: `(now - heartbeat).num_seconds()`
    /// and whether the worker was in its start-up grace.
    heartbeat_at: Option<DateTime<Utc>>,
    heartbeat_age: Option<i64>,
    worker_started: Option<DateTime<Utc>>,
    in_grace: bool,
    /// Everything after `{"timestamp":"…"`.
    rest: String,
}

impl CachedBody {
    /// Whether composing again at `now` would give the same body except the timestamp.
    fn still_valid(&self, now: DateTime<Utc>, settings: &StatusSettings) -> bool {
        self.heartbeat_at.map(|t| (now - t).num_seconds()) == self.heartbeat_age
            && self
                .worker_started
                .is_some_and(|t| in_startup_grace(t, now, settings))
                == self.in_grace
    }
}

/// What the refresher pushes besides alerts: the notifier (for counts in the
/// status) and the milestone follower (`None`: `notify.milestones: false`).
pub struct NotifyHooks {
    pub notifier: Notifier,
    pub follower: Option<EventFollower>,
}

impl StatusCache {
    /// A transition (a step ended, a stop finished) refreshes before answering, so
    /// a status read right after `stop` returns already shows what the stop saved.
    fn catch_up(&self) {
        let mut unseen = self.unseen.lock().unwrap_or_else(|e| e.into_inner());
        if unseen.has_changed().unwrap_or(false) {
            let record = unseen.borrow_and_update().clone();
            refresh(&self.layout, self, &record);
        }
    }

    pub fn status(&self) -> Status {
        self.catch_up();
        let record = self.pipeline.record();
        let facts = self.facts.read().unwrap_or_else(|e| e.into_inner());
        let settings = self.settings.read().unwrap_or_else(|e| e.into_inner());
        compose(&record, &facts, &settings, lavender::time::now_utc(), true)
    }

    /// Changes after every refresh of the cached facts.
    pub fn subscribe_refreshes(&self) -> watch::Receiver<u64> {
        self.refreshes.subscribe()
    }

    /// The body served by `GET /status`: the contract plus
    /// `notifications: {channel: {sent, failed, dropped}}` (an extra key the schema
    /// allows), composed again only when an input changed (see the module docs).
    pub fn status_body(&self) -> String {
        self.catch_up();
        let now = lavender::time::now_utc();
        let timestamp = serde_json::to_string(&lavender::time::rfc3339_z(now)).unwrap_or_default();
        let counts: BTreeMap<String, ChannelCounts> = self
            .notifier
            .as_ref()
            .map(Notifier::counts)
            .unwrap_or_default();
        let refresh = *self.refreshes.borrow();
        let settings = self.settings.read().unwrap_or_else(|e| e.into_inner());
        let mut cached = self.body.lock().unwrap_or_else(|e| e.into_inner());
        let current = !cached.record.has_changed().unwrap_or(true)
            && cached.body.as_ref().is_some_and(|b| {
                b.refresh == refresh && b.counts == counts && b.still_valid(now, &settings)
            });
        if !current {
            let record = cached.record.borrow_and_update().clone();
            let facts = self.facts.read().unwrap_or_else(|e| e.into_inner());
            let status = compose(&record, &facts, &settings, now, true);
            let heartbeat_at = match &facts.heartbeat {
                Some(Ok(hb)) => hb.time(),
                _ => None,
            };
            drop(facts);
            let worker_started = record
                .worker
                .as_ref()
                .and_then(|w| started_at(&w.started_at));
            let body = body_json(&status, &counts);
            let head = format!("{{\"timestamp\":{timestamp}");
            let rest = match body.strip_prefix(&head) {
                Some(rest) => rest.to_string(),
                // Not reached (the timestamp is the struct's first field); serve the
                // composed body uncached rather than a wrong one.
                None => return body,
            };
            cached.body = Some(CachedBody {
                refresh,
                counts,
                heartbeat_at,
                heartbeat_age: heartbeat_at.map(|t| (now - t).num_seconds()),
                worker_started,
                in_grace: worker_started.is_some_and(|t| in_startup_grace(t, now, &settings)),
                rest,
            });
        }
        let rest = cached.body.as_ref().map_or("", |b| b.rest.as_str());
        let mut out = String::with_capacity(16 + timestamp.len() + rest.len());
        out.push_str("{\"timestamp\":");
        out.push_str(&timestamp);
        out.push_str(rest);
        out
    }

    pub fn set_settings(&self, settings: StatusSettings) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = settings;
        self.body.lock().unwrap_or_else(|e| e.into_inner()).body = None;
    }
}

/// The status serialized in its field order (`timestamp` first), with
/// `notifications` added as the last key.
fn body_json(status: &Status, counts: &BTreeMap<String, ChannelCounts>) -> String {
    let mut body = serde_json::to_string(status).unwrap_or_else(|_| "{}".into());
    if body.ends_with('}') {
        body.pop();
        if body.len() > 1 {
            body.push(',');
        }
        body.push_str("\"notifications\":");
        body.push_str(&serde_json::to_string(counts).unwrap_or_else(|_| "{}".into()));
        body.push('}');
    }
    body
}

/// Starts the refresher and returns the cache it keeps current.
pub fn spawn(
    layout: Layout,
    pipeline: PipelineHandle,
    settings: StatusSettings,
    watch: WatchOptions,
    alerts: AlertSender,
    hooks: Option<NotifyHooks>,
) -> StatusCache {
    let record = pipeline.record();
    let facts = FileFacts::read(&layout, &record, &settings, true);
    let cache = StatusCache {
        facts: Arc::new(RwLock::new(facts)),
        settings: Arc::new(RwLock::new(settings)),
        unseen: Arc::new(Mutex::new(pipeline.subscribe())),
        body: Arc::new(Mutex::new(BodyCache {
            record: pipeline.subscribe(),
            body: None,
        })),
        refreshes: Arc::new(watch::Sender::new(0)),
        pipeline,
        layout: layout.clone(),
        notifier: hooks.as_ref().map(|h| h.notifier.clone()),
    };
    let follower = hooks.and_then(|h| h.follower);
    tokio::spawn(refresher(layout, cache.clone(), watch, alerts, follower));
    cache
}

/// The safety tick, or `LAVENDER_TEST_SAFETY_REFRESH_MS` (tests lengthen it to show
/// that file events alone keep the status current).
fn safety_refresh() -> Duration {
    std::env::var(TEST_SAFETY_REFRESH_VAR)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(SAFETY_REFRESH, Duration::from_millis)
}

async fn refresher(
    layout: Layout,
    cache: StatusCache,
    opts: WatchOptions,
    alerts: AlertSender,
    mut follower: Option<EventFollower>,
) {
    let (tx, mut events) = mpsc::unbounded_channel();
    let mut watcher = RunDirWatcher::new(&opts, tx);
    let mut records = cache.pipeline.subscribe();
    let mut tick = tokio::time::interval(safety_refresh());
    let mut health = HeartbeatWatch::new(&records.borrow());
    let mut disk_low = false;
    let mut disk_seen: Option<Instant> = None;
    loop {
        let record: PipelineRecord = records.borrow_and_update().clone();
        let run_dir = FileFacts::run_dir_for(&layout, &record);
        if run_dir.as_ref().is_none_or(|d| d.is_dir()) {
            watcher.watch(run_dir.as_deref());
        }
        refresh(&layout, &cache, &record);
        let refreshed_at = Instant::now();

        // Milestones: the follower reads only what was appended since its saved offset.
        if let (Some(f), Some(dir)) = (follower.as_mut(), run_dir.as_deref())
            && let Err(e) = f.poll(dir)
        {
            tracing::warn!("notify: cannot follow {}: {e}", dir.display());
        }

        let status = cache.status();
        let settings = cache
            .settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let heartbeat_at = {
            let facts = cache.facts.read().unwrap_or_else(|e| e.into_inner());
            match &facts.heartbeat {
                Some(Ok(hb)) => hb.time(),
                _ => None,
            }
        };
        if let Some(alert) = health.observe(&record, &status, heartbeat_at, settings.stale_after_s)
        {
            let _ = alerts.send(alert);
        }
        if let Some(low) = check_disk(&cache, &layout, settings.disk_floor_mib, &mut disk_seen) {
            if low.is_some() && !disk_low {
                let (avail_bytes, need_bytes) = low.unwrap_or_default();
                let _ = alerts.send(Alert::DiskLow {
                    path: layout.data_root.clone(),
                    avail_bytes,
                    need_bytes,
                });
            }
            disk_low = low.is_some();
        }

        tokio::select! {
            Some(()) = events.recv() => {
                // The first change of a quiet spell is read at once (a heartbeat shows
                // in the status within milliseconds); a burst (a checkpoint save, a
                // fast worker's heartbeats) is read at most once per COALESCE.
                let next = refreshed_at + COALESCE;
                if Instant::now() < next {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
                }
                while events.try_recv().is_ok() {}
            }
            changed = records.changed() => if changed.is_err() { return },
            _ = tick.tick() => {}
        }
    }
}

/// After a fresh disk reading: `Some(Some((avail, need)))` when free space is under
/// `disk_low_need(last checkpoint size, floor)`, `Some(None)` when it is not,
/// `None` when there was no new reading since `seen` (readings are reused for a while).
fn check_disk(
    cache: &StatusCache,
    layout: &Layout,
    floor_mib: u64,
    seen: &mut Option<Instant>,
) -> Option<Option<(u64, u64)>> {
    let (fresh, latest) = {
        let facts = cache.facts.read().unwrap_or_else(|e| e.into_inner());
        let fresh = facts.disk_read_at.is_some() && facts.disk_read_at != *seen;
        *seen = facts.disk_read_at;
        let latest = facts
            .run_dir
            .as_ref()
            .zip(facts.latest_checkpoint.as_ref())
            .map(|(d, c)| d.join(c));
        (fresh, latest)
    };
    if !fresh {
        return None;
    }
    let avail = super::disk::avail_bytes(&layout.data_root)?;
    let size = latest
        .as_deref()
        .map(lavender::checkpoint::dir_size)
        .filter(|s| *s > 0);
    let need = disk_low_need(size, floor_mib);
    Some((avail < need).then_some((avail, need)))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> StatusSettings {
        StatusSettings {
            stale_after_s: 300,
            startup_grace_s: 60,
            default_scale: "tiny".into(),
            default_chunk: 1,
            steps: Vec::new(),
            disk_floor_mib: 0,
            scales: lavender::config::Config::default().scales,
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        started_at(text).expect("test time")
    }

    #[test]
    fn body_starts_with_the_timestamp_and_ends_with_the_counts() {
        let status = Status::never_started(at("2026-11-30T10:00:00Z"));
        let counts = BTreeMap::from([("webhook".to_string(), ChannelCounts::default())]);
        let body = body_json(&status, &counts);
        assert!(
            body.starts_with("{\"timestamp\":\"2026-11-30T10:00:00.000Z\","),
            "{body}"
        );
        let value: serde_json::Value = serde_json::from_str(&body).expect("valid JSON");
        assert_eq!(value["notifications"]["webhook"]["sent"], 0);
        assert_eq!(value["schema_version"], lavender::status::SCHEMA_VERSION);
    }

    #[test]
    fn a_cached_body_expires_when_the_age_or_the_grace_would_change() {
        let composed = at("2026-11-30T10:00:10.500Z");
        let body = CachedBody {
            refresh: 0,
            counts: BTreeMap::new(),
            heartbeat_at: Some(at("2026-11-30T10:00:05.800Z")),
            heartbeat_age: Some(4),
            worker_started: Some(at("2026-11-30T09:59:11Z")),
            in_grace: true,
            rest: String::new(),
        };
        let s = settings();
        assert!(body.still_valid(composed, &s));
        assert!(body.still_valid(at("2026-11-30T10:00:10.799Z"), &s));
        // The heartbeat turns 5 s old at 10:00:10.800.
        assert!(!body.still_valid(at("2026-11-30T10:00:10.800Z"), &s));
        let no_heartbeat = CachedBody {
            heartbeat_at: None,
            heartbeat_age: None,
            ..body
        };
        assert!(no_heartbeat.still_valid(at("2026-11-30T10:00:10.999Z"), &s));
        // The 60 s grace ends at 10:00:11.
        assert!(!no_heartbeat.still_valid(at("2026-11-30T10:00:11Z"), &s));
    }
}
