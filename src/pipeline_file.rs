//! `state/pipeline.json`, the daemon's record of its pipeline, as a command with no
//! daemon reads it. The daemon alone writes it, atomically on every transition
//! (`daemon/src/pipeline/record.rs`, which holds everything it must remember); read
//! here is what the file says to others: the pipeline's state, its run and log, and
//! whether a worker or a crash restart is still the pipeline's. Paths inside the data
//! root are recorded relative to it ([`crate::data_root::resolve_recorded`]).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::error::{Error, Result};
use crate::status::PipelineState;

/// The file's name in the daemon's state directory.
pub const FILE: &str = "pipeline.json";

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PipelineFile {
    pub state: PipelineState,
    pub run_dir: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    /// A crash restart is due (the daemon died during the backoff).
    #[serde(default)]
    pub restart_pending: bool,
    /// The worker the daemon started and has not seen exit (its details are the daemon's).
    #[serde(default)]
    worker: Option<IgnoredAny>,
}

impl PipelineFile {
    /// Before any start: idle, no run.
    pub fn idle() -> PipelineFile {
        PipelineFile {
            state: PipelineState::Idle,
            run_dir: None,
            log_file: None,
            restart_pending: false,
            worker: None,
        }
    }

    /// `<state_dir>/pipeline.json` with its paths resolved against `data_root`, or
    /// [`PipelineFile::idle`] when there is none yet.
    pub fn read(state_dir: &Path, data_root: &Path) -> Result<PipelineFile> {
        let path = state_dir.join(FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PipelineFile::idle()),
            Err(e) => return Err(Error::io("read", &path, e)),
        };
        let mut file: PipelineFile =
            serde_json::from_slice(&bytes).map_err(|e| Error::Malformed {
                path: path.clone(),
                reason: format!("{e}; move it away to start afresh"),
            })?;
        for p in [&mut file.run_dir, &mut file.log_file] {
            if let Some(recorded) = p.as_mut() {
                *recorded = crate::data_root::resolve_recorded(data_root, recorded);
            }
        }
        Ok(file)
    }

    /// A worker runs, a stop is under way, or a crash restart is pending.
    pub fn is_active(&self) -> bool {
        matches!(self.state, PipelineState::Running | PipelineState::Stopping)
            || self.restart_pending
    }

    /// The record names a worker the daemon has not seen exit.
    pub fn has_worker(&self) -> bool {
        self.worker.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_with_its_paths_under_the_data_root() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        assert_eq!(
            PipelineFile::read(&state, dir.path()).unwrap(),
            PipelineFile::idle()
        );
        std::fs::write(
            state.join(FILE),
            r#"{"state":"running","run_dir":"checkpoints/run-1","log_file":null,
                "worker":{"pid":7,"start_time":1,"step":"train"},"restarts":2,"chunk":1}"#,
        )
        .unwrap();
        let file = PipelineFile::read(&state, dir.path()).unwrap();
        assert_eq!(file.state, PipelineState::Running);
        assert_eq!(file.run_dir, Some(dir.path().join("checkpoints/run-1")));
        assert!(file.is_active() && file.has_worker());

        std::fs::write(state.join(FILE), "{").unwrap();
        let err = PipelineFile::read(&state, dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pipeline.json") && err.contains("move it away"),
            "{err}"
        );
    }
}
