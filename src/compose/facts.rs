//! What the files say, read once per refresh: the heartbeat, the run's complete
//! checkpoints, the step manifests' counts, the disk, and done-markers. Of these
//! only the heartbeat changes every few steps; the refresher reads it alone then
//! ([`FileFacts::with_heartbeat_read`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::StatusSettings;
use crate::heartbeat::{self, Heartbeat};
use crate::layout::Layout;
use crate::pipeline_file::PipelineRecord;
use crate::stall::Said;
use crate::status::{DiskStatus, StepState};
use crate::step_heartbeat::StepHeartbeat;

/// The data root's filesystem as read once (the daemon reads it: `daemon/src/disk.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct DiskReading {
    pub status: DiskStatus,
    /// Bytes free to an unprivileged writer.
    pub avail_bytes: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct FileFacts {
    pub run_dir: Option<PathBuf>,
    /// `None`: no heartbeat file; `Some(Err)`: it exists but cannot be read.
    pub heartbeat: Option<Result<Heartbeat, String>>,
    /// A data step's or `mine_hard`'s progress beat (`None`: none, or unreadable).
    pub step_heartbeat: Option<StepHeartbeat>,
    pub checkpoints: u64,
    pub latest_checkpoint: Option<String>,
    /// How many of the run's checkpoints the daemon verified, and the newest of them.
    pub verified_checkpoints: u64,
    pub latest_verified_checkpoint: Option<String>,
    pub data_counts: BTreeMap<String, Option<u64>>,
    pub disk: DiskStatus,
    pub disk_read_at: Option<Instant>,
    /// Bytes free to an unprivileged writer, and the newest checkpoint's size, from
    /// the same reading as `disk` (the disk-low alert compares them).
    pub disk_avail_bytes: Option<u64>,
    pub latest_checkpoint_bytes: Option<u64>,
    /// The free bytes of the readings so far, for the time to full.
    pub disk_trend: super::DiskTrend,
    /// Step states from the done-markers, for a pipeline that has not started.
    pub idle_steps: BTreeMap<String, StepState>,
    /// What the live worker last said, dated on the monotonic clock by the daemon's
    /// refresher (`daemon/src/status/hang_clock.rs`); `None` when read from the files alone (then the
    /// wall clock dates it).
    pub said: Option<Said>,
    /// The runs that together trained the run, oldest first, when it resumed
    /// another (`crate::run::chain`); empty otherwise.
    pub lineage: Vec<String>,
    /// The run's figures in the daemon's ledger (`state/goodput.json`).
    pub goodput: Option<crate::goodput::GoodputStatus>,
    /// The run's last resume check (`state/replay/<run>.json`).
    pub replay: Option<crate::replay::ReplayStatus>,
    /// The lineage's tracker runs (`state/tracking/status.json`).
    pub tracking: Option<crate::tracking::TrackingStatus>,
}

impl FileFacts {
    /// No file read yet.
    pub fn empty() -> FileFacts {
        FileFacts {
            run_dir: None,
            heartbeat: None,
            step_heartbeat: None,
            checkpoints: 0,
            latest_checkpoint: None,
            verified_checkpoints: 0,
            latest_verified_checkpoint: None,
            data_counts: BTreeMap::new(),
            disk: DiskStatus::unknown(),
            disk_read_at: None,
            disk_avail_bytes: None,
            latest_checkpoint_bytes: None,
            disk_trend: super::DiskTrend::default(),
            idle_steps: BTreeMap::new(),
            said: None,
            lineage: Vec::new(),
            goodput: None,
            replay: None,
            tracking: None,
        }
    }

    /// When the heartbeat on disk was written, if there is a readable one.
    pub fn heartbeat_time(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        match &self.heartbeat {
            Some(Ok(hb)) => hb.time(),
            _ => None,
        }
    }

    /// Keeps `previous`'s disk reading (readings are reused for a while).
    pub fn with_disk_of(mut self, previous: &FileFacts) -> FileFacts {
        self.disk = previous.disk.clone();
        self.disk_read_at = previous.disk_read_at;
        self.disk_avail_bytes = previous.disk_avail_bytes;
        self.latest_checkpoint_bytes = previous.latest_checkpoint_bytes;
        self.disk_trend = previous.disk_trend.clone();
        self
    }

    /// These facts, whose disk was just read, with `previous`'s readings before it:
    /// the trend the time to full is projected from.
    pub fn with_trend_of(mut self, previous: &FileFacts) -> FileFacts {
        if let Some(at) = self.disk_read_at {
            self.disk_trend = previous.disk_trend.clone().after(at, self.disk_avail_bytes);
        }
        self
    }

    /// These facts with the heartbeat read again and the rest kept, for a change to
    /// the heartbeat alone. A full read also lists the run directory, reads every
    /// checkpoint's `trainer_state.json` and probes each step's manifest and
    /// done-marker: many times the cost, for what a heartbeat does not change.
    pub fn with_heartbeat_read(mut self) -> FileFacts {
        self.heartbeat = read_heartbeat(self.run_dir.as_deref());
        self
    }

    /// The run the status is about: the pipeline's, else the newest on disk.
    pub fn run_dir_for(layout: &Layout, record: &PipelineRecord) -> Option<PathBuf> {
        record.run_dir.clone().or_else(|| {
            crate::run::latest_run(&layout.checkpoints_root())
                .ok()
                .flatten()
                .map(|r| r.path)
        })
    }

    /// What the files say now. `disk`: the data root's filesystem as just read (the
    /// newest checkpoint's size is read with it), or `None` to leave it unknown.
    pub fn read(
        layout: &Layout,
        record: &PipelineRecord,
        settings: &StatusSettings,
        disk: Option<DiskReading>,
    ) -> FileFacts {
        let run_dir = Self::run_dir_for(layout, record);
        let heartbeat = read_heartbeat(run_dir.as_deref());
        let listed = run_dir
            .as_ref()
            .and_then(|dir| crate::checkpoint::list_run_checkpoints(dir).ok())
            .unwrap_or_default();
        let chunk = record.chunk.unwrap_or(settings.default_chunk);
        let idle_steps = settings
            .steps
            .iter()
            .map(|s| {
                let state = if layout.done_marker(chunk, *s).is_file() {
                    StepState::Done
                } else {
                    StepState::Pending
                };
                (s.to_string(), state)
            })
            .collect();
        let latest_checkpoint = listed.last().map(|c| c.name.clone());
        let (verified_checkpoints, latest_verified_checkpoint) = run_dir
            .as_deref()
            .map(|d| crate::checkpoint::verdicts::verified_summary(d, &listed))
            .unwrap_or_default();
        let (disk, disk_read_at, disk_avail_bytes, latest_checkpoint_bytes) = match disk {
            Some(reading) => (
                reading.status,
                Some(Instant::now()),
                reading.avail_bytes,
                run_dir
                    .as_ref()
                    .zip(latest_checkpoint.as_ref())
                    .map(|(d, c)| crate::checkpoint::dir_size(&d.join(c)))
                    .filter(|s| *s > 0),
            ),
            None => (DiskStatus::unknown(), None, None, None),
        };
        let chain = run_dir.as_deref().map(crate::run::chain);
        let lineage = chain
            .filter(|c| c.len() > 1)
            .map(|c| crate::run::names(&c))
            .unwrap_or_default();
        let step_heartbeat = run_dir
            .as_deref()
            .and_then(|d| crate::step_heartbeat::read(d).ok().flatten());
        let goodput = run_dir
            .as_deref()
            .and_then(|d| d.file_name())
            .and_then(|n| crate::goodput::read_status(&layout.state_dir, &n.to_string_lossy()));
        let replay = run_dir
            .as_deref()
            .and_then(|d| d.file_name())
            .and_then(|n| crate::replay::Replay::read(&layout.state_dir, &n.to_string_lossy()))
            .map(|r| r.status());
        let tracking = run_dir
            .as_deref()
            .and_then(|d| crate::tracking::TrackingStatus::read(&layout.state_dir, d));
        FileFacts {
            run_dir,
            heartbeat,
            step_heartbeat,
            checkpoints: listed.len() as u64,
            latest_checkpoint,
            verified_checkpoints,
            latest_verified_checkpoint,
            data_counts: crate::manifest::data_counts(&layout.data_root),
            disk,
            disk_read_at,
            disk_avail_bytes,
            latest_checkpoint_bytes,
            disk_trend: super::DiskTrend::default()
                .after(disk_read_at.unwrap_or_else(Instant::now), disk_avail_bytes),
            idle_steps,
            said: None,
            goodput,
            replay,
            tracking,
            lineage,
        }
    }
}

/// The run's heartbeat: `None` without a run or a heartbeat file.
fn read_heartbeat(run_dir: Option<&Path>) -> Option<Result<Heartbeat, String>> {
    match heartbeat::read(&heartbeat::path(run_dir?)) {
        Ok(hb) => Some(Ok(hb)),
        Err(e) if e.is_not_found() => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(step: u64) -> Heartbeat {
        serde_json::from_value(serde_json::json!({
            "step": step, "total_steps": 100, "stage": "pretrain",
            "timestamp": "2026-01-01T00:00:00Z", "pid": 1, "state": "training",
        }))
        .unwrap()
    }

    #[test]
    fn a_heartbeat_read_updates_the_heartbeat_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let before = FileFacts {
            run_dir: Some(dir.path().to_path_buf()),
            heartbeat: Some(Ok(beat(1))),
            checkpoints: 3,
            latest_checkpoint: Some("ckpt-3".into()),
            data_counts: [("downloads".to_string(), Some(100))].into(),
            disk_read_at: Some(Instant::now()),
            disk_avail_bytes: Some(1 << 30),
            idle_steps: [("train".to_string(), StepState::Done)].into(),
            ..FileFacts::empty()
        };
        heartbeat::write(dir.path(), &beat(2)).unwrap();
        let after = before.clone().with_heartbeat_read();
        assert_eq!(after.heartbeat, Some(Ok(beat(2))));
        assert_eq!(after.run_dir, before.run_dir);
        assert_eq!(after.checkpoints, 3);
        assert_eq!(after.latest_checkpoint, before.latest_checkpoint);
        assert_eq!(after.data_counts, before.data_counts);
        assert_eq!(after.disk_read_at, before.disk_read_at);
        assert_eq!(after.disk_avail_bytes, before.disk_avail_bytes);
        assert_eq!(after.idle_steps, before.idle_steps);

        std::fs::write(heartbeat::path(dir.path()), "{").unwrap();
        assert!(matches!(
            after.clone().with_heartbeat_read().heartbeat,
            Some(Err(_))
        ));
        std::fs::remove_file(heartbeat::path(dir.path())).unwrap();
        assert_eq!(after.with_heartbeat_read().heartbeat, None);
    }

    #[test]
    fn without_a_run_there_is_no_heartbeat() {
        let facts = FileFacts {
            heartbeat: Some(Ok(beat(1))),
            ..FileFacts::empty()
        };
        assert_eq!(facts.with_heartbeat_read().heartbeat, None);
    }
}
