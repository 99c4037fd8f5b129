//! `<run>/step_heartbeat.json`: a data step's or `mine_hard`'s sign of life. These
//! steps train nothing, so they write no `heartbeat.json`; while they work they
//! rewrite this file (atomically) at each progress line, at most every few seconds,
//! and the daemon counts `supervisor.data_step_stale_after_s` from the last one: a
//! step that stops writing it (a stopped process, a wedged read) is hung.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{IoContext, Result};

/// File name inside a run directory.
pub const FILE: &str = "step_heartbeat.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepHeartbeat {
    /// The step writing it (`dedup`, `mine_hard`, …).
    pub step: String,
    /// RFC 3339 UTC time of writing, in milliseconds.
    pub timestamp: String,
    pub pid: u32,
    /// Items done so far (documents, examples), as its progress line says.
    pub items: u64,
}

impl StepHeartbeat {
    /// This process's heartbeat for `step`, written now.
    pub fn now(step: &str, items: u64) -> StepHeartbeat {
        StepHeartbeat {
            step: step.to_string(),
            timestamp: crate::time::rfc3339_z(crate::time::now_utc()),
            pid: std::process::id(),
            items,
        }
    }

    /// The parsed `timestamp`, or `None` when it is not RFC 3339.
    pub fn time(&self) -> Option<DateTime<Utc>> {
        crate::time::parse_rfc3339(&self.timestamp)
    }
}

/// `<run_dir>/step_heartbeat.json`.
pub fn path(run_dir: &Path) -> PathBuf {
    run_dir.join(FILE)
}

pub fn write(run_dir: &Path, beat: &StepHeartbeat) -> Result<()> {
    crate::atomic::write_json(&path(run_dir), beat)
}

/// The step heartbeat of `run_dir`; `Ok(None)` when there is none.
pub fn read(run_dir: &Path) -> Result<Option<StepHeartbeat>> {
    let path = path(run_dir);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).ctx("read step heartbeat", &path),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| crate::error::Error::Malformed {
            path: path.clone(),
            reason: crate::heartbeat::json_reason(&e),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_then_read_back_and_none_without_one() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let beat = StepHeartbeat::now("dedup", 1234);
        write(dir.path(), &beat).unwrap();
        let back = read(dir.path()).unwrap().unwrap();
        assert_eq!(back, beat);
        assert!(back.time().is_some());
        std::fs::write(path(dir.path()), "{").unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("step_heartbeat.json"), "{err}");
    }
}
