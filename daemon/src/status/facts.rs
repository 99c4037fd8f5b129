//! What the files say, read once per refresh: the heartbeat, the run's complete
//! checkpoints, the step manifests' counts, the disk, and done-markers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use lavender::heartbeat::{self, Heartbeat};
use lavender::status::{DiskStatus, StepState};

use super::StatusSettings;
use crate::layout::Layout;
use crate::pipeline::PipelineRecord;
use crate::pipeline::markers;

#[derive(Debug, Clone)]
pub struct FileFacts {
    pub run_dir: Option<PathBuf>,
    /// `None`: no heartbeat file; `Some(Err)`: it exists but cannot be read.
    pub heartbeat: Option<Result<Heartbeat, String>>,
    pub checkpoints: u64,
    pub latest_checkpoint: Option<String>,
    pub data_counts: BTreeMap<String, Option<u64>>,
    pub disk: DiskStatus,
    pub disk_read_at: Option<Instant>,
    /// Bytes free to an unprivileged writer, and the newest checkpoint's size, from
    /// the same reading as `disk` (the disk-low alert compares them).
    pub disk_avail_bytes: Option<u64>,
    pub latest_checkpoint_bytes: Option<u64>,
    /// Step states from the done-markers, for a pipeline that has not started.
    pub idle_steps: BTreeMap<String, StepState>,
}

impl FileFacts {
    /// No file read yet (tests compose from it).
    #[cfg(test)]
    pub fn empty() -> FileFacts {
        FileFacts {
            run_dir: None,
            heartbeat: None,
            checkpoints: 0,
            latest_checkpoint: None,
            data_counts: BTreeMap::new(),
            disk: DiskStatus::unknown(),
            disk_read_at: None,
            disk_avail_bytes: None,
            latest_checkpoint_bytes: None,
            idle_steps: BTreeMap::new(),
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
        self
    }

    /// The run the status is about: the pipeline's, else the newest on disk.
    pub fn run_dir_for(layout: &Layout, record: &PipelineRecord) -> Option<PathBuf> {
        record.run_dir.clone().or_else(|| {
            lavender::run::latest_run(&layout.checkpoints_root())
                .ok()
                .flatten()
                .map(|r| r.path)
        })
    }

    pub fn read(
        layout: &Layout,
        record: &PipelineRecord,
        settings: &StatusSettings,
        with_disk: bool,
    ) -> FileFacts {
        let run_dir = Self::run_dir_for(layout, record);
        let heartbeat =
            run_dir
                .as_ref()
                .and_then(|dir| match heartbeat::read(&heartbeat::path(dir)) {
                    Ok(hb) => Some(Ok(hb)),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => Some(Err(e.to_string())),
                });
        let listed = run_dir
            .as_ref()
            .and_then(|dir| lavender::checkpoint::list_run_checkpoints(dir).ok())
            .unwrap_or_default();
        let chunk = record.chunk.unwrap_or(settings.default_chunk);
        let idle_steps = settings
            .steps
            .iter()
            .map(|s| {
                let state = if markers::is_done(layout, chunk, *s) {
                    StepState::Done
                } else {
                    StepState::Pending
                };
                (s.to_string(), state)
            })
            .collect();
        let latest_checkpoint = listed.last().map(|c| c.name.clone());
        let (disk, disk_read_at, disk_avail_bytes, latest_checkpoint_bytes) = if with_disk {
            (
                super::disk::disk_status(&layout.data_root),
                Some(Instant::now()),
                super::disk::avail_bytes(&layout.data_root),
                run_dir
                    .as_ref()
                    .zip(latest_checkpoint.as_ref())
                    .map(|(d, c)| lavender::checkpoint::dir_size(&d.join(c)))
                    .filter(|s| *s > 0),
            )
        } else {
            (DiskStatus::unknown(), None, None, None)
        };
        FileFacts {
            run_dir,
            heartbeat,
            checkpoints: listed.len() as u64,
            latest_checkpoint,
            data_counts: lavender::manifest::data_counts(&layout.data_root),
            disk,
            disk_read_at,
            disk_avail_bytes,
            latest_checkpoint_bytes,
            idle_steps,
        }
    }
}
