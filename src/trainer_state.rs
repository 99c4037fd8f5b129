//! `trainer_state.json`: the last file written into a checkpoint. Its presence, and
//! that it parses, is what makes a checkpoint complete.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::atomic;
use crate::error::{Error, Result};

pub const FILE: &str = "trainer_state.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Global optimizer step across all stages.
    pub step: u64,
    #[serde(default)]
    pub total_steps: u64,
    #[serde(default)]
    pub epoch: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u32>,
    pub stage: String,
    /// Steps done within `stage`.
    #[serde(default)]
    pub stage_step: u64,
    #[serde(default)]
    pub lr: f64,
    #[serde(default)]
    pub loss: Option<f64>,
    #[serde(default)]
    pub val_loss: Option<f64>,
    #[serde(default)]
    pub best_val_loss: Option<f64>,
    #[serde(default)]
    pub data_cursor: Value,
    #[serde(default)]
    pub rng_state: Value,
    #[serde(default)]
    pub wall_time_s: f64,
    #[serde(default)]
    pub saved_at: String,
    /// Fields added by newer workers or other trainers survive a read-modify-write.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TrainerState {
    pub fn new(stage: impl Into<String>, step: u64) -> Self {
        TrainerState {
            step,
            total_steps: 0,
            epoch: 0.0,
            epochs: None,
            stage: stage.into(),
            stage_step: 0,
            lr: 0.0,
            loss: None,
            val_loss: None,
            best_val_loss: None,
            data_cursor: Value::Null,
            rng_state: Value::Null,
            wall_time_s: 0.0,
            saved_at: String::new(),
            extra: Map::new(),
        }
    }
}

/// Read the state of the checkpoint in `checkpoint_dir`.
pub fn read(checkpoint_dir: &Path) -> Result<TrainerState> {
    let path = checkpoint_dir.join(FILE);
    let bytes = fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::Empty { path });
    }
    serde_json::from_slice(&bytes).map_err(|e| Error::Malformed {
        path,
        reason: e.to_string(),
    })
}

/// Write the state atomically (used by `CheckpointBuilder::commit`).
pub fn write(checkpoint_dir: &Path, state: &TrainerState) -> Result<()> {
    atomic::write_json(&checkpoint_dir.join(FILE), state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_unknown_fields() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(FILE),
            r#"{"step": 7, "stage": "sft", "future_field": [1, 2]}"#,
        )
        .unwrap();
        let s = read(dir.path()).unwrap();
        assert_eq!(s.step, 7);
        assert_eq!(s.extra["future_field"], serde_json::json!([1, 2]));
        write(dir.path(), &s).unwrap();
        assert_eq!(read(dir.path()).unwrap(), s);
    }

    #[test]
    fn truncated_and_empty_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(FILE), "").unwrap();
        assert!(matches!(read(dir.path()), Err(Error::Empty { .. })));
        fs::write(dir.path().join(FILE), r#"{"step": 7, "sta"#).unwrap();
        assert!(matches!(read(dir.path()), Err(Error::Malformed { .. })));
    }
}
