//! `trainer_state.json`: the last file written into a checkpoint. Its presence, and
//! that it parses, is what makes a checkpoint complete.
//!
//! A Hugging Face `Trainer` checkpoint (`checkpoint-<N>/`) has a `trainer_state.json`
//! of its own shape (`global_step`, `max_steps`, `log_history`, …); [`read`] maps it
//! onto [`TrainerState`] so such checkpoints are listed, resumed and retained like
//! lavender's own. Its validation loss is the run's `eval_loss` at the checkpoint's
//! step, none when the run did not evaluate there: retention judges a checkpoint by
//! an evaluation of that checkpoint, never an earlier one.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::atomic;
use crate::error::{Error, Result};

pub const FILE: &str = "trainer_state.json";

/// The stage given to a Hugging Face checkpoint (its state has none).
pub const HF_STAGE: &str = "train";
/// The key, and its value, marking a state read from a Hugging Face document.
const FORMAT_KEY: &str = "format";
const HF_FORMAT: &str = "hugging_face";

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
    parse(&bytes, path)
}

/// `bytes` as a trainer state read from `path` (named in the error): lavender's own
/// shape, else a Hugging Face Trainer's.
pub fn parse(bytes: &[u8], path: std::path::PathBuf) -> Result<TrainerState> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::Empty { path });
    }
    match serde_json::from_slice::<TrainerState>(bytes) {
        Ok(state) => Ok(state),
        Err(e) => serde_json::from_slice::<Map<String, Value>>(bytes)
            .ok()
            .and_then(|doc| from_hugging_face(&doc))
            .ok_or_else(|| Error::Malformed {
                path,
                reason: e.to_string(),
            }),
    }
}

/// True when `checkpoint_dir` is a complete checkpoint (its marker parses) of
/// lavender's own, not a Hugging Face one.
pub fn is_lavender_own(checkpoint_dir: &Path) -> bool {
    read(checkpoint_dir).is_ok_and(|s| s.extra.get(FORMAT_KEY) != Some(&json!(HF_FORMAT)))
}

/// A Hugging Face `TrainerState` document as lavender's; `None` when `doc` is not one
/// (no non-negative integer `global_step`).
pub fn from_hugging_face(doc: &Map<String, Value>) -> Option<TrainerState> {
    let step = doc.get("global_step")?.as_u64()?;
    let number = |key: &str| doc.get(key).and_then(Value::as_f64);
    let mut state = TrainerState::new(HF_STAGE, step);
    state.total_steps = doc.get("max_steps").and_then(Value::as_u64).unwrap_or(0);
    state.epoch = number("epoch").unwrap_or(0.0);
    state.epochs = number("num_train_epochs")
        .filter(|e| e.fract() == 0.0 && *e >= 0.0 && *e <= u32::MAX as f64)
        .map(|e| e as u32);
    state.stage_step = step;
    let history: Vec<&Map<String, Value>> = doc
        .get("log_history")
        .and_then(Value::as_array)
        .map(|h| h.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    let at_or_before = |entry: &Map<String, Value>| {
        entry
            .get("step")
            .and_then(Value::as_u64)
            .is_none_or(|s| s <= step)
    };
    let last = |key: &str| {
        history
            .iter()
            .filter(|e| at_or_before(e))
            .rev()
            .find_map(|e| e.get(key).and_then(Value::as_f64))
            .filter(|v| v.is_finite())
    };
    state.loss = last("loss");
    state.lr = last("learning_rate").unwrap_or(0.0);
    state.val_loss = history
        .iter()
        .rev()
        .filter(|e| e.get("step").and_then(Value::as_u64) == Some(step))
        .find_map(|e| e.get("eval_loss").and_then(Value::as_f64))
        .filter(|v| v.is_finite());
    state.best_val_loss = history
        .iter()
        .filter(|e| at_or_before(e))
        .filter_map(|e| e.get("eval_loss").and_then(Value::as_f64))
        .filter(|v| v.is_finite())
        .min_by(f64::total_cmp);
    state.extra.insert(FORMAT_KEY.into(), json!(HF_FORMAT));
    Some(state)
}

/// Write the state atomically.
pub fn write(checkpoint_dir: &Path, state: &TrainerState) -> Result<()> {
    atomic::write_file(
        &checkpoint_dir.join(FILE),
        &to_bytes(checkpoint_dir, state)?,
    )
}

/// The bytes [`write`] puts in the file: `CheckpointBuilder::commit` hashes them into
/// the checkpoint's manifest before it writes them, so the commit marker is covered.
pub fn to_bytes(checkpoint_dir: &Path, state: &TrainerState) -> Result<Vec<u8>> {
    let mut bytes =
        serde_json::to_vec_pretty(state).map_err(|e| crate::error::Error::Malformed {
            path: checkpoint_dir.join(FILE),
            reason: format!("could not serialize: {e}"),
        })?;
    bytes.push(b'\n');
    Ok(bytes)
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
    fn a_hugging_face_state_reads_as_a_checkpoint_with_its_eval_loss() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(FILE),
            r#"{"global_step": 20, "max_steps": 40, "epoch": 0.5, "num_train_epochs": 1,
                "best_metric": null, "log_history": [
                  {"step": 10, "loss": 3.5, "learning_rate": 0.001, "epoch": 0.25},
                  {"step": 10, "eval_loss": 3.25},
                  {"step": 20, "loss": 3.0, "learning_rate": 0.0005, "epoch": 0.5},
                  {"step": 20, "eval_loss": 3.5},
                  {"step": 30, "eval_loss": 1.0}
                ]}"#,
        )
        .unwrap();
        let s = read(dir.path()).unwrap();
        assert_eq!(
            (s.step, s.total_steps, s.stage.as_str()),
            (20, 40, HF_STAGE)
        );
        assert_eq!((s.epoch, s.epochs), (0.5, Some(1)));
        assert_eq!((s.loss, s.lr), (Some(3.0), 0.0005));
        assert_eq!(s.val_loss, Some(3.5), "the eval_loss at step 20");
        assert_eq!(s.best_val_loss, Some(3.25));
    }

    #[test]
    fn a_hugging_face_checkpoint_not_evaluated_at_its_step_has_no_validation_loss() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(FILE),
            r#"{"global_step": 25, "log_history": [
                  {"step": 20, "eval_loss": 1.5},
                  {"step": 25, "loss": 3.0, "learning_rate": 0.0005}
                ]}"#,
        )
        .unwrap();
        let s = read(dir.path()).unwrap();
        assert_eq!(s.val_loss, None, "step 20's evaluation is not step 25's");
        assert_eq!(s.best_val_loss, Some(1.5));
    }

    #[test]
    fn neither_lavender_nor_hugging_face_is_malformed() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(FILE), r#"{"global_step": -1}"#).unwrap();
        assert!(matches!(read(dir.path()), Err(Error::Malformed { .. })));
        fs::write(dir.path().join(FILE), r#"{"epoch": 1.0}"#).unwrap();
        assert!(matches!(read(dir.path()), Err(Error::Malformed { .. })));
    }

    #[test]
    fn truncated_and_empty_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(FILE), "").unwrap();
        assert!(matches!(read(dir.path()), Err(Error::Empty { .. })));
        fs::write(dir.path().join(FILE), r#"{"step": 7, "sta"#).unwrap();
        assert!(matches!(read(dir.path()), Err(Error::Malformed { .. })));
    }

    mod parse_properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

            /// Any bytes, and any JSON object with a step: an error or a state; never
            /// a panic (the Hugging Face mapping included).
            #[test]
            fn any_input_parses_or_fails(
                bytes in proptest::collection::vec(any::<u8>(), 0..256),
                step in any::<i64>(),
                epochs in any::<f64>(),
                key in "[a-z_]{1,12}",
                value in any::<f64>(),
            ) {
                let _ = parse(&bytes, "t.json".into());
                let hf = serde_json::json!({
                    "global_step": step, "num_train_epochs": epochs, "max_steps": step,
                    "log_history": [{"step": step, key.clone(): value}, {"eval_loss": value}, 3]
                });
                let _ = parse(&serde_json::to_vec(&hf).unwrap(), "t.json".into());
                let own = serde_json::json!({"step": step, "stage": key, "val_loss": value});
                let _ = parse(&serde_json::to_vec(&own).unwrap(), "t.json".into());
            }
        }
    }
}
