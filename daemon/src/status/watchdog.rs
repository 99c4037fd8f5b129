//! The watchdog: follows the refresher's snapshots and raises what they imply —
//! the heartbeat going stale and recovering (`health.rs`), a hung worker handed to
//! the pipeline actor to kill and restart (`lavender::stall`, `supervisor.on_stall:
//! restart`), the run's longest steady heartbeat interval handed to the actor to
//! keep (`stale_after_s: auto`), free space falling under the disk-low need. (The
//! run's milestones are pushed by the feed's follower of `events.jsonl`,
//! `events::EventFollower`.)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use lavender::config::OnStall;
use tokio::sync::watch;

use super::cache::StatusSnapshot;
use super::health::HeartbeatWatch;
use crate::alert::{Alert, AlertSender};
use crate::pipeline::{HungReport, PipelineHandle};
use crate::push::disk_low_need;
use lavender::compose::stall_watch;
use lavender::layout::Layout;
use lavender::pipeline_file::PipelineRecord;
use lavender::stall::{Beat, IntervalLearner, Watch};

pub fn spawn(
    layout: Layout,
    snapshots: watch::Receiver<Arc<StatusSnapshot>>,
    alerts: AlertSender,
    pipeline: PipelineHandle,
) {
    tokio::spawn(run(layout, snapshots, alerts, pipeline));
}

async fn run(
    layout: Layout,
    mut snapshots: watch::Receiver<Arc<StatusSnapshot>>,
    alerts: AlertSender,
    pipeline: PipelineHandle,
) {
    let mut health = HeartbeatWatch::new(&snapshots.borrow().record);
    let mut hangs = HangWatch::default();
    let mut disk = DiskWatch::default();
    loop {
        let snap = snapshots.borrow_and_update().clone();
        let now = lavender::time::now_utc();
        let heartbeat_at = snap.facts.heartbeat_time();
        let watch = stall_watch(&snap.record, &snap.facts, &snap.settings, true);
        let allowance_s = watch.map_or(0, |w| w.allowance.as_secs());
        let being_killed = hangs.reported_now(&snap.record);
        if let Some(alert) = health.observe(
            &snap.record,
            &snap.status,
            heartbeat_at,
            allowance_s,
            being_killed,
        ) {
            // With `on_stall: restart` the actor tells of the hang once it restarted it.
            let told_by_actor = matches!(alert, Alert::Stale { .. })
                && snap.settings.supervisor.on_stall == OnStall::Restart;
            if !told_by_actor {
                let _ = alerts.send(alert);
            }
        }
        hangs.observe(&snap, watch, now, &pipeline);
        if let Some(alert) = disk.observe(&snap, &layout) {
            let _ = alerts.send(alert);
        }
        if std::mem::take(&mut disk.save_short) {
            pipeline.report_disk_short();
        }
        if snapshots.changed().await.is_err() {
            return;
        }
    }
}

/// Hung workers reported to the actor (once each), and the run's heartbeat
/// intervals learned.
#[derive(Default)]
struct HangWatch {
    /// The worker last reported hung (its recorded start).
    reported: Option<DateTime<Utc>>,
    /// The run whose intervals `learner` holds.
    run: Option<PathBuf>,
    learner: IntervalLearner,
}

impl HangWatch {
    /// Whether the worker running now is the one reported hung.
    fn reported_now(&self, record: &PipelineRecord) -> bool {
        record
            .worker()
            .is_some_and(|w| self.reported == Some(w.started_at))
    }

    fn observe(
        &mut self,
        snap: &StatusSnapshot,
        watch: Option<Watch>,
        now: DateTime<Utc>,
        pipeline: &PipelineHandle,
    ) {
        let record = &snap.record;
        let Some(worker) = record.worker() else {
            return;
        };
        if self.run != record.run_dir {
            self.run = record.run_dir.clone();
            self.learner = IntervalLearner::new(record.heartbeat_interval_s);
        }
        if let (Some(run), Some(beat)) = (
            &record.run_dir,
            snap.facts
                .heartbeat
                .as_ref()
                .and_then(|hb| hb.as_ref().ok())
                .and_then(Beat::of),
        ) && let Some(longest) = self.learner.observe(worker.started_at, &beat)
            // Kept in the record when it grew by a tenth or more: a few writes a run.
            && record.heartbeat_interval_s.is_none_or(|known| longest > known * 1.1)
        {
            pipeline.report_interval(run.clone(), longest);
        }
        if snap.settings.supervisor.on_stall != OnStall::Restart
            || self.reported == Some(worker.started_at)
        {
            return;
        }
        let Some(watch) = watch else {
            return;
        };
        if watch.overdue(now)
            && pipeline.report_hung(HungReport {
                worker: worker.handle.clone(),
                phase: watch.phase,
                step: watch.step,
                stalled_for: watch.stalled_for(now),
                allowance: watch.allowance,
                allowance_key: watch.allowance_key(),
                work: watch.work,
            })
        {
            self.reported = Some(worker.started_at);
        }
    }
}

/// Disk-low: one alert when free space falls under the need, again only after it
/// was back above.
#[derive(Default)]
struct DiskWatch {
    low: bool,
    /// The reading last looked at (readings are reused across snapshots).
    seen: Option<Instant>,
    /// The newest reading says the next save will not fit (its size × 1.1 + the
    /// floor) while a worker runs: the actor checks and applies retention early.
    save_short: bool,
}

impl DiskWatch {
    fn observe(&mut self, snap: &StatusSnapshot, layout: &Layout) -> Option<Alert> {
        let facts = &snap.facts;
        if facts.disk_read_at.is_none() || facts.disk_read_at == self.seen {
            return None;
        }
        self.seen = facts.disk_read_at;
        let avail_bytes = facts.disk_avail_bytes?;
        self.save_short = snap.record.worker().is_some()
            && avail_bytes
                < crate::pipeline::save_room::save_need(
                    facts.latest_checkpoint_bytes,
                    snap.settings.disk_floor_mib,
                );
        let need_bytes = disk_low_need(facts.latest_checkpoint_bytes, snap.settings.disk_floor_mib);
        let was_low = std::mem::replace(&mut self.low, avail_bytes < need_bytes);
        (self.low && !was_low).then(|| Alert::DiskLow {
            path: layout.data_root.clone(),
            avail_bytes,
            need_bytes,
        })
    }
}
