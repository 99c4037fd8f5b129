//! The watchdog: follows the refresher's snapshots and raises what they imply —
//! the heartbeat going stale and recovering (`health.rs`), free space falling under
//! the disk-low need. (The run's milestones are pushed by the feed's follower of
//! `events.jsonl`, `notify::EventFollower`.)

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::cache::StatusSnapshot;
use super::health::HeartbeatWatch;
use crate::alert::Alert;
use crate::alert::AlertSender;
use crate::layout::Layout;
use crate::notify::disk_low_need;

pub fn spawn(layout: Layout, snapshots: watch::Receiver<Arc<StatusSnapshot>>, alerts: AlertSender) {
    tokio::spawn(run(layout, snapshots, alerts));
}

async fn run(
    layout: Layout,
    mut snapshots: watch::Receiver<Arc<StatusSnapshot>>,
    alerts: AlertSender,
) {
    let mut health = HeartbeatWatch::new(&snapshots.borrow().record);
    let mut disk = DiskWatch::default();
    loop {
        let snap = snapshots.borrow_and_update().clone();
        let heartbeat_at = snap.facts.heartbeat_time();
        if let Some(alert) = health.observe(
            &snap.record,
            &snap.status,
            heartbeat_at,
            snap.settings.stale_after_s,
        ) {
            let _ = alerts.send(alert);
        }
        if let Some(alert) = disk.observe(&snap, &layout) {
            let _ = alerts.send(alert);
        }
        if snapshots.changed().await.is_err() {
            return;
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
}

impl DiskWatch {
    fn observe(&mut self, snap: &StatusSnapshot, layout: &Layout) -> Option<Alert> {
        let facts = &snap.facts;
        if facts.disk_read_at.is_none() || facts.disk_read_at == self.seen {
            return None;
        }
        self.seen = facts.disk_read_at;
        let avail_bytes = facts.disk_avail_bytes?;
        let need_bytes = disk_low_need(facts.latest_checkpoint_bytes, snap.settings.disk_floor_mib);
        let was_low = std::mem::replace(&mut self.low, avail_bytes < need_bytes);
        (self.low && !was_low).then(|| Alert::DiskLow {
            path: layout.data_root.clone(),
            avail_bytes,
            need_bytes,
        })
    }
}
