//! The status as the refresher last published it: an immutable [`StatusSnapshot`]
//! behind a `tokio::sync::watch`. Readers borrow it; only the refresher
//! (`refresher.rs`) reads files and writes snapshots.
//!
//! A snapshot holds the `GET /status` body already serialized, split around its
//! timestamp. A request writes the current timestamp in front of the rest and
//! answers: no file I/O, no lock of ours, one allocation (the response; the route
//! serves the same bytes for the rest of that millisecond). The rest
//! stays exactly what composing afresh would give until a time-dependent value
//! changes (the heartbeat's age in whole seconds, the end of the start-up grace);
//! the refresher publishes a new snapshot at that moment, and a request that comes
//! in between composes from the snapshot's facts instead (still no file I/O).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use chrono::{DateTime, Datelike as _, Timelike as _, Utc};
use lavender::status::Status;
use tokio::sync::watch;

use crate::push::ChannelCounts;
use crate::replicate::replicator::ReplicationStatus;
use lavender::compose::{FileFacts, Liveness, StatusSettings, compose, stall_watch};
use lavender::pipeline_file::PipelineRecord;

/// Everything the status is composed from, and the composed body.
#[derive(Debug)]
pub struct StatusSnapshot {
    pub record: PipelineRecord,
    pub facts: FileFacts,
    pub settings: StatusSettings,
    /// Pushes per notification channel (shown as `notifications`).
    pub counts: BTreeMap<String, ChannelCounts>,
    /// The status when it was composed.
    pub status: Status,
    /// Grows whenever the run's `events.jsonl` may have grown (an event on it, or a
    /// full read): the feed follows the file only then.
    pub events_mark: u64,
    /// The time-dependent inputs at composition (see [`StatusSnapshot::still_valid`]).
    heartbeat_at: Option<DateTime<Utc>>,
    heartbeat_age: Option<i64>,
    /// When the worker turns hung unless a heartbeat comes first (not yet at composition).
    stale_at: Option<DateTime<Utc>>,
    /// The body after `{"timestamp":"…` (from the timestamp's closing quote on).
    rest: String,
    /// Where the checkpoints' copies are (shown as `replication`), when configured.
    pub replication: Option<ReplicationStatus>,
}

impl StatusSnapshot {
    pub fn compose(
        record: PipelineRecord,
        facts: FileFacts,
        settings: StatusSettings,
        counts: BTreeMap<String, ChannelCounts>,
        now: DateTime<Utc>,
    ) -> StatusSnapshot {
        let status = compose(&record, &facts, &settings, now, Liveness::Supervised);
        let heartbeat_at = facts.heartbeat_time();
        let stale_at = stall_watch(&record, &facts, &settings, true)
            .map(|w| w.deadline())
            .filter(|d| now < *d);
        let body = body_json(&status, &counts, None);
        StatusSnapshot {
            heartbeat_at,
            heartbeat_age: heartbeat_at.map(|t| (now - t).num_seconds()),
            stale_at,
            rest: rest_of(&body),
            record,
            facts,
            settings,
            counts,
            status,
            events_mark: 0,
            replication: None,
        }
    }

    /// The snapshot with `replication` in its body (`None`: not configured).
    pub fn with_replication(mut self, replication: Option<ReplicationStatus>) -> StatusSnapshot {
        if replication.is_some() {
            self.rest = rest_of(&body_json(&self.status, &self.counts, replication.as_ref()));
            self.replication = replication;
        }
        self
    }

    /// Whether composing again at `now` would give the same status except the timestamp.
    pub fn still_valid(&self, now: DateTime<Utc>) -> bool {
        self.heartbeat_at.map(|t| (now - t).num_seconds()) == self.heartbeat_age
            && self.stale_at.is_none_or(|at| now < at)
    }

    /// When [`StatusSnapshot::still_valid`] may turn false: the next whole second of
    /// the heartbeat's age, or the end of the phase's allowance. `None`: never.
    pub fn expires_at(&self) -> Option<DateTime<Utc>> {
        let second = chrono::Duration::seconds(1);
        let age_tick = self.heartbeat_at.zip(self.heartbeat_age).map(|(t, age)| {
            // `num_seconds` truncates toward zero: a heartbeat from the future (clock
            // skew) changes its age at the next whole second as well.
            if age >= 0 {
                t + second * (age as i32 + 1)
            } else {
                t + second * age as i32
            }
        });
        match (age_tick, self.stale_at) {
            (Some(a), Some(g)) => Some(a.min(g)),
            (a, g) => a.or(g),
        }
    }

    /// The status at `now`.
    pub fn status_at(&self, now: DateTime<Utc>) -> Status {
        if self.still_valid(now) {
            let mut status = self.status.clone();
            status.timestamp = lavender::time::rfc3339_z(now);
            status
        } else {
            compose(
                &self.record,
                &self.facts,
                &self.settings,
                now,
                Liveness::Supervised,
            )
        }
    }

    /// The `GET /status` body at `now`: the contract plus
    /// `notifications: {channel: {sent, failed, dropped}}` (an extra key the schema allows).
    pub fn body_at(&self, now: DateTime<Utc>) -> String {
        if !self.still_valid(now) {
            let status = compose(
                &self.record,
                &self.facts,
                &self.settings,
                now,
                Liveness::Supervised,
            );
            return body_json(&status, &self.counts, self.replication.as_ref());
        }
        let mut out = String::with_capacity(self.rest.len() + 40);
        out.push_str("{\"timestamp\":\"");
        push_timestamp(&mut out, now);
        out.push_str(&self.rest);
        out
    }
}

/// `2026-11-30T10:00:00.000Z`, as `lavender::time::rfc3339_z` writes it, appended
/// without an allocation of its own.
fn push_timestamp(out: &mut String, t: DateTime<Utc>) {
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        // A leap second shows as .1000 in chrono's nanoseconds; keep three digits.
        (t.nanosecond() / 1_000_000).min(999)
    );
}

/// The body after `{"timestamp":"…`: the timestamp is the struct's first field; the
/// rest starts at its closing quote.
fn rest_of(body: &str) -> String {
    body.strip_prefix("{\"timestamp\":\"")
        .and_then(|b| b.find('"').map(|end| b[end..].to_string()))
        .unwrap_or_default()
}

/// The status serialized in its field order (`timestamp` first), with
/// `notifications` added as the last key, and `replication` after it when configured.
fn body_json(
    status: &Status,
    counts: &BTreeMap<String, ChannelCounts>,
    replication: Option<&ReplicationStatus>,
) -> String {
    let mut body = serde_json::to_string(status).unwrap_or_else(|_| "{}".into());
    if body.ends_with('}') {
        body.pop();
        if body.len() > 1 {
            body.push(',');
        }
        body.push_str("\"notifications\":");
        body.push_str(&serde_json::to_string(counts).unwrap_or_else(|_| "{}".into()));
        if let Some(r) = replication {
            body.push_str(",\"replication\":");
            body.push_str(&serde_json::to_string(r).unwrap_or_else(|_| "null".into()));
        }
        body.push('}');
    }
    body
}

/// What readers hold: the latest snapshot, and the way to hand the refresher new
/// settings (SIGHUP).
#[derive(Clone)]
pub struct StatusCache {
    snapshots: watch::Receiver<Arc<StatusSnapshot>>,
    settings: Arc<watch::Sender<StatusSettings>>,
}

impl StatusCache {
    pub(super) fn new(
        snapshots: watch::Receiver<Arc<StatusSnapshot>>,
        settings: Arc<watch::Sender<StatusSettings>>,
    ) -> StatusCache {
        StatusCache {
            snapshots,
            settings,
        }
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<StatusSnapshot> {
        self.snapshots.borrow().clone()
    }

    pub fn status(&self) -> Status {
        self.snapshots.borrow().status_at(lavender::time::now_utc())
    }

    /// Changes with every snapshot published.
    pub fn subscribe_refreshes(&self) -> watch::Receiver<Arc<StatusSnapshot>> {
        self.snapshots.clone()
    }

    /// Waits until a snapshot composed from `record` (or a later one) is published,
    /// so an answer right after a transition (a stop, a start) already shows it.
    pub async fn caught_up(&self, record: &PipelineRecord) {
        let mut rx = self.snapshots.clone();
        let wait = rx.wait_for(|s| s.record == *record);
        // A newer transition may overtake `record`; the answer then shows a later one.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), wait).await;
    }

    pub fn set_settings(&self, settings: StatusSettings) {
        self.settings.send_replace(settings);
    }
}

/// Settings of the default config with no steps, for tests.
#[cfg(test)]
fn test_settings() -> StatusSettings {
    let mut supervisor = lavender::config::Config::default().supervisor;
    supervisor.stale_after_s = lavender::config::StaleAfter::Seconds(300.0);
    supervisor.startup_grace_s = 60;
    StatusSettings {
        supervisor,
        default_scale: lavender::config::Scale::Tiny,
        default_chunk: 1,
        steps: Vec::new(),
        disk_floor_mib: 0,
        scales: lavender::config::Config::default().scales,
    }
}

/// A never-started pipeline's snapshot, and a cache holding it with the sender
/// that publishes the next ones, for tests of the cache's readers.
#[cfg(test)]
impl StatusCache {
    pub(crate) fn never_started(
        now: DateTime<Utc>,
    ) -> (StatusCache, watch::Sender<Arc<StatusSnapshot>>) {
        let settings = test_settings();
        let snapshot = StatusSnapshot::compose(
            PipelineRecord::idle(),
            FileFacts::empty(),
            settings.clone(),
            BTreeMap::new(),
            now,
        );
        let (publish, snapshots) = watch::channel(Arc::new(snapshot));
        let cache = StatusCache::new(snapshots, Arc::new(watch::Sender::new(settings)));
        (cache, publish)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("test time")
    }

    fn snapshot_at(now: DateTime<Utc>) -> StatusSnapshot {
        StatusSnapshot::compose(
            PipelineRecord::idle(),
            FileFacts::empty(),
            test_settings(),
            BTreeMap::from([("webhook".to_string(), ChannelCounts::default())]),
            now,
        )
    }

    #[test]
    fn body_starts_with_the_timestamp_and_ends_with_the_counts() {
        let status = Status::never_started(at("2026-11-30T10:00:00Z"));
        let counts = BTreeMap::from([("webhook".to_string(), ChannelCounts::default())]);
        let body = body_json(&status, &counts, None);
        assert!(
            body.starts_with("{\"timestamp\":\"2026-11-30T10:00:00.000Z\","),
            "{body}"
        );
        let value: serde_json::Value = serde_json::from_str(&body).expect("valid JSON");
        assert_eq!(value["notifications"]["webhook"]["sent"], 0);
        assert_eq!(value["schema_version"], lavender::status::SCHEMA_VERSION);
    }

    #[test]
    fn the_served_body_is_the_composed_one_at_that_instant() {
        let snap = snapshot_at(at("2026-11-30T10:00:00Z"));
        let later = at("2026-11-30T10:07:31.042Z");
        let served = snap.body_at(later);
        let composed = body_json(
            &compose(
                &snap.record,
                &snap.facts,
                &snap.settings,
                later,
                Liveness::Supervised,
            ),
            &snap.counts,
            None,
        );
        assert_eq!(served, composed);
        assert!(served.starts_with("{\"timestamp\":\"2026-11-30T10:07:31.042Z\","));
        let mut ts = String::new();
        push_timestamp(&mut ts, later);
        assert_eq!(ts, lavender::time::rfc3339_z(later));
    }

    #[test]
    fn a_snapshot_expires_when_the_age_or_the_staleness_would_change() {
        let composed = at("2026-11-30T10:00:10.500Z");
        let mut snap = snapshot_at(composed);
        snap.heartbeat_at = Some(at("2026-11-30T10:00:05.800Z"));
        snap.heartbeat_age = Some(4);
        snap.stale_at = Some(at("2026-11-30T10:00:11Z"));
        assert!(snap.still_valid(composed));
        assert!(snap.still_valid(at("2026-11-30T10:00:10.799Z")));
        // The heartbeat turns 5 s old at 10:00:10.800.
        assert!(!snap.still_valid(at("2026-11-30T10:00:10.800Z")));
        assert_eq!(snap.expires_at(), Some(at("2026-11-30T10:00:10.800Z")));
        snap.heartbeat_at = None;
        snap.heartbeat_age = None;
        assert!(snap.still_valid(at("2026-11-30T10:00:10.999Z")));
        // The phase's allowance ends at 10:00:11: the heartbeat turns stale.
        assert!(!snap.still_valid(at("2026-11-30T10:00:11Z")));
        assert_eq!(snap.expires_at(), Some(at("2026-11-30T10:00:11Z")));
    }
}
