//! A run's `log_history.json`: the dense per-step record the worker keeps
//! (`{step, epoch, learning_rate, loss, grad_norm}`, plus `eval_*` entries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{ExportError, Result};
use crate::error::IoContext;

pub const HISTORY_FILE: &str = "log_history.json";

#[derive(Debug, Clone)]
pub struct LogHistory {
    pub path: PathBuf,
    pub entries: Vec<Map<String, Value>>,
}

impl LogHistory {
    /// Reads `<run_dir>/log_history.json`.
    pub fn read(run_dir: &Path) -> Result<LogHistory> {
        let path = run_dir.join(HISTORY_FILE);
        if !path.is_file() {
            return Err(ExportError::missing(
                "the run's log_history.json",
                &path,
                "the worker writes it at every checkpoint; was the run trained by lavender-worker?",
            ));
        }
        let bytes = std::fs::read(&path).ctx("read", &path)?;
        let values: Vec<Value> = serde_json::from_slice(&bytes).map_err(|e| {
            ExportError::invalid(&path, format!("not a JSON array of log entries: {e}"))
        })?;
        let mut entries = Vec::with_capacity(values.len());
        for (i, v) in values.into_iter().enumerate() {
            match v {
                Value::Object(m) if m.get("step").and_then(Value::as_u64).is_some() => {
                    entries.push(m)
                }
                other => {
                    return Err(ExportError::invalid(
                        &path,
                        format!("entry {i} is not an object with a step: {other}"),
                    ));
                }
            }
        }
        Ok(LogHistory { path, entries })
    }

    /// Entries of steps up to and including `step`, in file order.
    pub fn up_to(&self, step: u64) -> Vec<Map<String, Value>> {
        self.entries
            .iter()
            .filter(|e| {
                e.get("step")
                    .and_then(Value::as_u64)
                    .is_some_and(|s| s <= step)
            })
            .cloned()
            .collect()
    }

    /// The learning rate of every step `1..=last`: element `i` is step `i + 1`'s.
    /// Every step must be there; a gap is an error naming the missing steps.
    pub fn learning_rates(&self, last: u64) -> Result<Vec<f64>> {
        let mut by_step: BTreeMap<u64, f64> = BTreeMap::new();
        for e in &self.entries {
            let (Some(step), Some(lr)) = (
                e.get("step").and_then(Value::as_u64),
                e.get("learning_rate").and_then(Value::as_f64),
            ) else {
                continue;
            };
            // The worker cuts its history back on resume, so a step appears once; if
            // not, the later entry is the trajectory the newer checkpoints followed.
            by_step.insert(step, lr);
        }
        let missing: Vec<u64> = (1..=last).filter(|s| !by_step.contains_key(s)).collect();
        if !missing.is_empty() {
            let shown: Vec<String> = missing.iter().take(5).map(u64::to_string).collect();
            let more = if missing.len() > 5 { ", …" } else { "" };
            return Err(ExportError::invalid(
                &self.path,
                format!(
                    "has no learning_rate for {} of steps 1..={last} (steps {}{more}); the per-step record is incomplete, so lr×steps cannot be exact",
                    missing.len(),
                    shown.join(", ")
                ),
            ));
        }
        Ok((1..=last).map(|s| by_step[&s]).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn history(entries: Value) -> (tempfile::TempDir, LogHistory) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(HISTORY_FILE),
            serde_json::to_vec(&entries).unwrap(),
        )
        .unwrap();
        let h = LogHistory::read(dir.path()).unwrap();
        (dir, h)
    }

    #[test]
    fn learning_rates_are_per_step_and_skip_eval_entries() {
        let (_d, h) = history(json!([
            {"step": 1, "learning_rate": 0.1, "loss": 3.0},
            {"step": 2, "learning_rate": 0.2, "loss": 2.5},
            {"step": 2, "eval_loss": 2.4},
            {"step": 3, "learning_rate": 0.3, "loss": 2.0},
        ]));
        assert_eq!(h.learning_rates(3).unwrap(), vec![0.1, 0.2, 0.3]);
        assert_eq!(h.learning_rates(2).unwrap(), vec![0.1, 0.2]);
        assert_eq!(h.up_to(2).len(), 3);
    }

    #[test]
    fn a_gap_names_the_missing_steps() {
        let (_d, h) = history(json!([
            {"step": 1, "learning_rate": 0.1},
            {"step": 3, "learning_rate": 0.3},
        ]));
        let err = h.learning_rates(4).unwrap_err().to_string();
        assert!(err.contains("2 of steps 1..=4 (steps 2, 4)"), "{err}");
    }
}
