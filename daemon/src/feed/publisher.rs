//! The task that fills the feed: after every status-cache refresh (file events in
//! the run directory, the periodic tick) and every pipeline transition (each
//! committed record in order, not only the latest) it publishes what changed — the
//! state, the heartbeat, new `events.jsonl` lines — and counts worker restarts for
//! `/metrics`. The events come from the one
//! follower of `events.jsonl` (`events::EventFollower`), which pushes the
//! milestones in the same pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::{Feed, Kind, Snapshot};
use crate::events::EventFollower;
use crate::goodput::Goodput;
use crate::pipeline::PipelineHandle;
use crate::status::StatusCache;
use lavender::layout::Layout;
use lavender::pipeline_file::PipelineRecord;
use tokio::sync::broadcast::{
    self,
    error::{RecvError, TryRecvError},
};

/// Counts the daemon keeps while it runs (Prometheus counters restart with the process).
#[derive(Debug, Default)]
pub struct Counters {
    /// Crash restarts scheduled since this daemon started.
    pub worker_restarts: AtomicU64,
}

pub fn spawn(
    feed: Feed,
    cache: StatusCache,
    pipeline: PipelineHandle,
    layout: Layout,
    follower: EventFollower,
    goodput: Goodput,
) -> Arc<Counters> {
    let counters = Arc::new(Counters::default());
    // Subscribed here, before the daemon takes requests: the first pass shows the
    // record as it is now, then each transition after it.
    let transitions = pipeline.subscribe_transitions();
    let first = pipeline.record();
    tokio::spawn(run(
        feed,
        cache,
        (first, transitions),
        layout,
        (follower, goodput),
        counters.clone(),
    ));
    counters
}

async fn run(
    feed: Feed,
    cache: StatusCache,
    (first, mut transitions): (PipelineRecord, broadcast::Receiver<PipelineRecord>),
    layout: Layout,
    (mut follower, mut goodput): (EventFollower, Goodput),
    counters: Arc<Counters>,
) {
    let mut refreshes = cache.subscribe_refreshes();
    let mut closing = feed.watch();
    let mut published = Published::default();
    let mut restarts_seen = first.restarts;
    let mut followed: Option<(u64, PipelineRecord)> = None;
    // The record to publish next, and the latest one (a refresh publishes it again).
    let mut latest = first.clone();
    let mut next = Some(first);
    loop {
        // Transitions in the order they were committed; one fallen too far behind
        // skips to the oldest still held.
        let record = match next.take() {
            Some(r) => r,
            None => match transitions.try_recv() {
                Ok(r) => r,
                Err(TryRecvError::Lagged(_)) => continue,
                Err(TryRecvError::Closed) => return,
                Err(TryRecvError::Empty) => latest.clone(),
            },
        };
        latest = record.clone();
        // `restarts` grows by one per crash restart and drops to 0 on a new start
        // or after a long healthy run: count the growth only.
        if record.restarts > restarts_seen {
            counters.worker_restarts.fetch_add(
                u64::from(record.restarts - restarts_seen),
                Ordering::Relaxed,
            );
        }
        restarts_seen = record.restarts;

        let snapshot = Snapshot::take(&cache, &record);
        // A worker's last milestones come before the transition its exit caused.
        // The file is followed when it may have grown, or the pipeline moved.
        let follow = (snapshot.events_mark, record.clone());
        let mut events = Vec::new();
        if followed.as_ref() != Some(&follow) {
            events = milestones(&feed, &layout, &mut follower, &snapshot);
            followed = Some(follow);
        }
        let read = cache.snapshot();
        let beat = read.facts.heartbeat.as_ref().and_then(|b| b.as_ref().ok());
        goodput.observe(&record, beat, &events);
        published.state(&feed, &snapshot);
        published.heartbeat(&feed, &snapshot);
        if snapshot.status.pipeline.state == lavender::status::PipelineState::Running {
            crate::logs::story::progress(&snapshot.status.training);
        }

        tokio::select! {
            changed = refreshes.changed() => if changed.is_err() { return },
            got = transitions.recv() => match got {
                Ok(r) => next = Some(r),
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            _ = closing.wait_past(u64::MAX) => return,
        }
    }
}

/// What was last published, to publish changes only.
#[derive(Default)]
struct Published {
    state: Option<Value>,
    beat: Option<Value>,
}

impl Published {
    fn state(&mut self, feed: &Feed, snap: &Snapshot) {
        let p = &snap.status.pipeline;
        let key = json!({
            "state": p.state,
            "active_step": snap.status.active_step,
            "restarts": p.restarts,
            "steps": snap.steps,
            "last_error": snap.last_error,
        });
        if self.state.as_ref() == Some(&key) {
            return;
        }
        let previous = self.state.as_ref().map(|s| s["state"].clone());
        let mut data = key.clone();
        data["previous"] = previous.unwrap_or(Value::Null);
        feed.publish(Kind::State, &data);
        self.state = Some(key);
    }

    /// Publishes a full snapshot when what the heartbeat shows changed (not its
    /// age, which a reader computes from the time it received it).
    fn heartbeat(&mut self, feed: &Feed, snap: &Snapshot) {
        let t = &snap.status.training;
        let key = json!([
            t.step,
            t.total_steps,
            t.loss,
            t.loss_smooth,
            t.lr,
            t.stage,
            t.running,
            t.heartbeat_stale,
            t.heartbeat_error,
            t.checkpoints,
            t.verified_checkpoints,
            t.latest_checkpoint,
            snap.status.pipeline.state,
            snap.status.active_step,
            snap.status.disk.avail_gib,
            snap.run,
        ]);
        if self.beat.as_ref() == Some(&key) {
            return;
        }
        feed.publish(Kind::Heartbeat, snap);
        self.beat = Some(key);
    }
}

/// New lines of the run's `events.jsonl` (a new run from its first line), each
/// naming the run; the follower pushes their milestones in the same pass. Returns them.
fn milestones(
    feed: &Feed,
    layout: &Layout,
    follower: &mut EventFollower,
    snap: &Snapshot,
) -> Vec<lavender::events::Event> {
    let Some(run) = &snap.run else {
        return Vec::new();
    };
    let run_dir = layout.checkpoints_root().join(run);
    match follower.poll(&run_dir) {
        Ok(followed) => {
            for event in &followed.events {
                // The pipeline log says each milestone as the pushes do.
                if let Some(text) = crate::push::format::milestone_text(event, "") {
                    crate::logs::story::say(&text);
                }
                let mut data = serde_json::to_value(event).unwrap_or(Value::Null);
                data["run"] = json!(run);
                feed.publish(Kind::Milestone, &data);
            }
            followed.events
        }
        Err(e) => {
            tracing::warn!("cannot follow the events of {}: {e}", run_dir.display());
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::pipeline_file::RecordState;
    use lavender::status::PipelineState;

    /// The transitions the feed streams, as `previous → state`.
    fn states(feed: &Feed) -> Vec<String> {
        feed.items()
            .iter()
            .filter(|i| i.kind == Kind::State)
            .map(|i| {
                let v: Value = serde_json::from_str(&i.data).unwrap();
                format!(
                    "{} → {}",
                    v["previous"].as_str().unwrap_or("-"),
                    v["state"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn every_committed_transition_is_published_in_order_however_quick() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("data"), None);
        let (cache, _publish) = StatusCache::never_started(lavender::time::now_utc());
        let feed = Feed::new(64);
        let (commits, transitions) = broadcast::channel(8);
        // Committed before the task first runs: a watch would show the last alone.
        let mut record = PipelineRecord::idle();
        let first = record.clone();
        for state in [
            PipelineState::Running,
            PipelineState::Crashed,
            PipelineState::Running,
        ] {
            record.state = RecordState::of_kind(state);
            commits.send(record.clone()).unwrap();
        }
        let follower = EventFollower::new(None, &layout.state_dir, &layout.data_root);
        let (alerts, _unheard) = tokio::sync::mpsc::unbounded_channel();
        let goodput = Goodput::load(&layout, &lavender::config::Config::default(), alerts);
        let task = tokio::spawn(run(
            feed.clone(),
            cache,
            (first, transitions),
            layout,
            (follower, goodput),
            Arc::default(),
        ));
        let mut watch = feed.watch();
        let want = [
            "- → idle",
            "idle → running",
            "running → crashed",
            "crashed → running",
        ];
        let wait = async {
            loop {
                let seen = feed.last_seq();
                if states(&feed).len() >= want.len() {
                    break;
                }
                watch.wait_past(seen).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), wait)
            .await
            .unwrap_or_else(|_| panic!("the feed streamed {:?}", states(&feed)));
        assert_eq!(states(&feed), want);
        task.abort();
    }
}
