//! `state/pipeline.json`: everything the daemon must remember across its own
//! restarts (which step, which run, which worker pid + start time, restarts).
//! Written atomically on every transition; also what `status` reads with no daemon.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lavender::status::{PipelineState, StepState};
use serde::{Deserialize, Serialize};

use super::StartRequest;
use crate::process::WorkerHandle;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEntry {
    pub name: String,
    pub state: StepState,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// The local process (pid + start time) or the Slurm job.
    #[serde(flatten)]
    pub handle: WorkerHandle,
    pub step: String,
    /// RFC 3339 UTC; the start-up grace for heartbeats counts from here.
    pub started_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineRecord {
    pub state: PipelineState,
    #[serde(default)]
    pub request: Option<StartRequest>,
    pub chunk: Option<u32>,
    pub scale: Option<String>,
    #[serde(default)]
    pub steps: Vec<StepEntry>,
    pub active_step: Option<String>,
    pub run_dir: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    pub worker: Option<WorkerRecord>,
    #[serde(default)]
    pub restarts: u32,
    /// The checkpoint the train step started from (its crash restarts fall back to it
    /// when the run has no checkpoint of its own yet).
    pub resume_from: Option<PathBuf>,
    /// A crash restart is due (the daemon died during the backoff).
    #[serde(default)]
    pub restart_pending: bool,
    pub last_error: Option<String>,
    pub updated_at: String,
}

impl PipelineRecord {
    pub fn idle() -> PipelineRecord {
        PipelineRecord {
            state: PipelineState::Idle,
            request: None,
            chunk: None,
            scale: None,
            steps: Vec::new(),
            active_step: None,
            run_dir: None,
            log_file: None,
            worker: None,
            restarts: 0,
            resume_from: None,
            restart_pending: false,
            last_error: None,
            updated_at: lavender::time::rfc3339_z(lavender::time::now_utc()),
        }
    }

    /// The saved record, or `idle` when there is none yet.
    pub fn load(path: &Path) -> Result<PipelineRecord> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
                format!(
                    "{} is not a valid pipeline state file; move it away to start afresh",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PipelineRecord::idle()),
            Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
        }
    }

    pub fn save(&mut self, path: &Path) -> Result<()> {
        self.updated_at = lavender::time::rfc3339_z(lavender::time::now_utc());
        lavender::atomic::write_json(path, self)
            .with_context(|| format!("save pipeline state to {}", path.display()))
    }

    pub fn set_step(&mut self, name: &str, state: StepState) {
        if let Some(entry) = self.steps.iter_mut().find(|s| s.name == name) {
            entry.state = state;
        }
    }

    pub fn step_state(&self, name: &str) -> Option<StepState> {
        self.steps.iter().find(|s| s.name == name).map(|s| s.state)
    }

    /// True while a start must be refused (409): a worker runs, a stop is under
    /// way, or a crash restart is pending.
    pub fn is_active(&self) -> bool {
        matches!(self.state, PipelineState::Running | PipelineState::Stopping)
            || self.restart_pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// State files written by earlier versions must keep loading after an upgrade,
    /// or a daemon restart would lose track of a running worker.
    #[test]
    fn a_saved_state_file_still_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pipeline-v1.json");
        let r = PipelineRecord::load(&path).unwrap();
        assert_eq!(r.state, PipelineState::Running);
        assert_eq!(r.worker.as_ref().unwrap().handle.pid(), Some(13584));
        assert_eq!(r.step_state("downloads"), Some(StepState::Done));
        assert_eq!(r.restarts, 1);
    }

    #[test]
    fn a_slurm_worker_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pipeline.json");
        let mut r = PipelineRecord::idle();
        r.worker = Some(WorkerRecord {
            handle: WorkerHandle::Slurm {
                slurm: crate::process::slurm::SlurmJob {
                    job_id: "42".into(),
                    node: Some("gpu7".into()),
                    state: Some("RUNNING".into()),
                    reason: None,
                },
            },
            step: "train".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
        });
        r.save(&p).unwrap();
        let back = PipelineRecord::load(&p).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.worker.unwrap().handle.pid(), None);
    }

    #[test]
    fn missing_file_is_idle_and_garbage_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pipeline.json");
        assert_eq!(PipelineRecord::load(&p).unwrap().state, PipelineState::Idle);
        std::fs::write(&p, "{not json").unwrap();
        let err = format!("{:#}", PipelineRecord::load(&p).unwrap_err());
        assert!(err.contains("pipeline.json"), "{err}");
    }

    #[test]
    fn save_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pipeline.json");
        let mut r = PipelineRecord::idle();
        r.restarts = 2;
        r.save(&p).unwrap();
        assert_eq!(PipelineRecord::load(&p).unwrap(), r);
    }
}
