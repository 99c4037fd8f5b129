//! The task that fills the feed: after every status-cache refresh (file events in
//! the run directory, the periodic tick) and every pipeline transition it
//! publishes what changed — the state, the heartbeat, new `events.jsonl` lines —
//! and counts worker restarts for `/metrics`. The events come from the one
//! follower of `events.jsonl` (`events::EventFollower`), which pushes the
//! milestones in the same pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::{Feed, Kind, Snapshot};
use crate::events::EventFollower;
use crate::pipeline::PipelineHandle;
use crate::status::StatusCache;
use lavender::layout::Layout;
use lavender::pipeline_file::PipelineRecord;

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
) -> Arc<Counters> {
    let counters = Arc::new(Counters::default());
    tokio::spawn(run(
        feed,
        cache,
        pipeline,
        layout,
        follower,
        counters.clone(),
    ));
    counters
}

async fn run(
    feed: Feed,
    cache: StatusCache,
    pipeline: PipelineHandle,
    layout: Layout,
    mut follower: EventFollower,
    counters: Arc<Counters>,
) {
    let mut refreshes = cache.subscribe_refreshes();
    let mut records = pipeline.subscribe();
    let mut closing = feed.watch();
    let mut published = Published::default();
    let mut restarts_seen = pipeline.record().restarts;
    let mut followed: Option<(u64, PipelineRecord)> = None;
    loop {
        let record: PipelineRecord = records.borrow_and_update().clone();
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
        if followed.as_ref() != Some(&follow) {
            milestones(&feed, &layout, &mut follower, &snapshot);
            followed = Some(follow);
        }
        published.state(&feed, &snapshot);
        published.heartbeat(&feed, &snapshot);
        if snapshot.status.pipeline.state == lavender::status::PipelineState::Running {
            crate::logs::story::progress(&snapshot.status.training);
        }

        tokio::select! {
            changed = refreshes.changed() => if changed.is_err() { return },
            changed = records.changed() => if changed.is_err() { return },
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
/// naming the run; the follower pushes their milestones in the same pass.
fn milestones(feed: &Feed, layout: &Layout, follower: &mut EventFollower, snap: &Snapshot) {
    let Some(run) = &snap.run else { return };
    let run_dir = layout.checkpoints_root().join(run);
    match follower.poll(&run_dir) {
        Ok(followed) => {
            for event in followed.events {
                // The pipeline log says each milestone as the pushes do.
                if let Some(text) = crate::notify::format::milestone_text(&event, "") {
                    crate::logs::story::say(&text);
                }
                let mut data = serde_json::to_value(&event).unwrap_or(Value::Null);
                data["run"] = json!(run);
                feed.publish(Kind::Milestone, &data);
            }
        }
        Err(e) => tracing::warn!("cannot follow the events of {}: {e}", run_dir.display()),
    }
}
