//! `<run>/heartbeat.json`: the worker's latest progress, rewritten atomically every
//! `log_every` steps and on every state change. The daemon reads it to compute the
//! `training` block of the status and to detect a stalled worker.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::failure::Failure;

/// File name of the heartbeat inside a run directory.
pub const FILE: &str = "heartbeat.json";

/// What the worker is doing when it writes the heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Started, no step trained yet (the start-up allowance applies).
    Starting,
    /// Loading a checkpoint or data (its own allowance applies).
    Loading,
    Training,
    /// Evaluating on held-out data (its own allowance applies).
    Evaluating,
    Saving,
    Stopping,
    Finished,
    Failed,
}

impl WorkerState {
    /// The wire name (`"training"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Loading => "loading",
            WorkerState::Training => "training",
            WorkerState::Evaluating => "evaluating",
            WorkerState::Saving => "saving",
            WorkerState::Stopping => "stopping",
            WorkerState::Finished => "finished",
            WorkerState::Failed => "failed",
        }
    }

    /// True once the worker will write no further progress: it finished or failed.
    pub fn is_terminal(self) -> bool {
        matches!(self, WorkerState::Finished | WorkerState::Failed)
    }

    /// True while heartbeats are expected to keep coming (so an old one means a stall).
    pub fn expects_heartbeats(self) -> bool {
        matches!(
            self,
            WorkerState::Starting
                | WorkerState::Loading
                | WorkerState::Training
                | WorkerState::Evaluating
                | WorkerState::Saving
        )
    }
}

impl std::fmt::Display for WorkerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The heartbeat document. Optional fields may be missing from the file (a worker
/// written in another language may not know them); unknown extra keys are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub step: u64,
    pub total_steps: u64,
    pub stage: String,
    pub epoch: Option<f64>,
    pub epochs: Option<u32>,
    pub loss: Option<f64>,
    pub loss_smooth: Option<f64>,
    pub lr: Option<f64>,
    pub grad_norm: Option<f64>,
    pub steps_per_sec: Option<f64>,
    pub eta_seconds: Option<u64>,
    /// RFC 3339 UTC time of writing, e.g. `2026-04-24T16:08:45Z`.
    pub timestamp: String,
    pub pid: u32,
    pub state: WorkerState,
    pub latest_checkpoint: Option<String>,
    /// Why the worker is ending without finishing (state `failed`), when it knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

impl Heartbeat {
    /// Where the worker stands and nothing more (the readings empty), written now by
    /// this process.
    pub fn new(step: u64, total_steps: u64, stage: impl Into<String>, state: WorkerState) -> Self {
        Heartbeat {
            step,
            total_steps,
            stage: stage.into(),
            epoch: None,
            epochs: None,
            loss: None,
            loss_smooth: None,
            lr: None,
            grad_norm: None,
            steps_per_sec: None,
            eta_seconds: None,
            timestamp: crate::time::rfc3339_z(crate::time::now_utc()),
            pid: std::process::id(),
            state,
            latest_checkpoint: None,
            failure: None,
        }
    }

    /// The parsed `timestamp`, or `None` when it is not RFC 3339.
    pub fn time(&self) -> Option<DateTime<Utc>> {
        crate::time::parse_rfc3339(&self.timestamp)
    }
}

/// `<run_dir>/heartbeat.json`.
pub fn path(run_dir: &Path) -> PathBuf {
    run_dir.join(FILE)
}

/// Write the heartbeat atomically (temp file, fsync, rename), so a reader sees
/// either the previous heartbeat or this one, never half of one.
pub fn write(run_dir: &Path, hb: &Heartbeat) -> Result<()> {
    crate::atomic::write_json(&path(run_dir), hb)
}

/// Read a heartbeat file. A missing file is `Error::Io` (check `is_not_found()`),
/// an empty one `Error::Empty`, anything that does not parse `Error::Malformed`.
pub fn read(path: &Path) -> Result<Heartbeat> {
    let bytes = std::fs::read(path).ctx("read heartbeat", path)?;
    parse(path, &bytes)
}

/// Parse heartbeat bytes read from `path` (used for error messages only).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Heartbeat> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::Empty {
            path: path.to_path_buf(),
        });
    }
    serde_json::from_slice(bytes).map_err(|e| Error::Malformed {
        path: path.to_path_buf(),
        reason: json_reason(&e),
    })
}

/// A short, user-facing reason for a JSON parse failure.
pub(crate) fn json_reason(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Eof => format!("truncated JSON ({e})"),
        Category::Syntax => format!("not valid JSON ({e})"),
        Category::Data => format!("unexpected content ({e})"),
        Category::Io => format!("read error ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Heartbeat {
        Heartbeat {
            step: 1000,
            total_steps: 50_000,
            stage: "pretrain".into(),
            epoch: Some(1.25),
            epochs: Some(3),
            loss: Some(1.125),
            loss_smooth: Some(0.899),
            lr: Some(9.99e-5),
            grad_norm: Some(0.7),
            steps_per_sec: Some(0.19),
            eta_seconds: Some(289_477),
            timestamp: "2026-04-05T19:14:27Z".into(),
            pid: 13584,
            state: WorkerState::Training,
            latest_checkpoint: Some("pretrain-19-10-00-0005".into()),
            failure: None,
        }
    }

    fn malformed_reason(r: Result<Heartbeat>) -> String {
        match r {
            Err(Error::Malformed { reason, .. }) => reason,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let hb = sample();
        write(dir.path(), &hb).unwrap();
        let back = read(&path(dir.path())).unwrap();
        assert_eq!(back, hb);
        assert_eq!(
            back.time().unwrap().to_rfc3339(),
            "2026-04-05T19:14:27+00:00"
        );
        // Overwriting leaves no temp files behind.
        write(dir.path(), &Heartbeat { step: 1100, ..hb }).unwrap();
        assert_eq!(read(&path(dir.path())).unwrap().step, 1100);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn missing_file_is_not_found_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = read(&path(dir.path())).unwrap_err();
        assert!(
            matches!(err, Error::Io { .. }) && err.is_not_found(),
            "{err:?}"
        );
    }

    #[test]
    fn empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path());
        std::fs::write(&p, b"").unwrap();
        assert!(matches!(read(&p), Err(Error::Empty { .. })));
        std::fs::write(&p, b" \n").unwrap();
        assert!(matches!(read(&p), Err(Error::Empty { .. })));
    }

    #[test]
    fn truncated_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path());
        std::fs::write(&p, br#"{"step": 12, "tot"#).unwrap();
        let reason = malformed_reason(read(&p));
        assert!(reason.starts_with("truncated"), "{reason}");
    }

    #[test]
    fn garbage_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path());
        std::fs::write(&p, [0xff, 0x00, 0x13, b'{', 0x80]).unwrap();
        let reason = malformed_reason(read(&p));
        assert!(reason.starts_with("not valid JSON"), "{reason}");
    }

    #[test]
    fn wrong_type() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path());
        let mut v = serde_json::to_value(sample()).unwrap();
        v["step"] = serde_json::json!("twelve");
        std::fs::write(&p, v.to_string()).unwrap();
        let reason = malformed_reason(read(&p));
        assert!(
            reason.contains("step") || reason.contains("invalid type"),
            "{reason}"
        );

        v["step"] = serde_json::json!(12);
        v["state"] = serde_json::json!("dancing");
        std::fs::write(&p, v.to_string()).unwrap();
        let reason = malformed_reason(read(&p));
        assert!(reason.contains("dancing"), "{reason}");
    }

    #[test]
    fn optional_fields_may_be_missing_and_unknown_ones_are_ignored() {
        let p = Path::new("hb.json");
        let hb = parse(
            p,
            br#"{"step": 3, "total_steps": 10, "stage": "sft", "timestamp": "2026-01-01T00:00:00Z",
                 "pid": 42, "state": "starting", "gpu_temp": 71}"#,
        )
        .unwrap();
        assert_eq!(hb.step, 3);
        assert_eq!(hb.loss, None);
        assert_eq!(hb.state, WorkerState::Starting);
    }
}
