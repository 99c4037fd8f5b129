//! A run's `log_history.json`: the dense per-step record the worker keeps
//! (`{step, epoch, learning_rate, loss, grad_norm}`, plus `eval_*` entries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{ExportError, Result};
use crate::error::IoContext;

pub const HISTORY_FILE: &str = "log_history.json";

/// Gives every entry that has a step but no `learning_rate` (the evaluations) the
/// learning rate of the training entry at the same step: the rate of the update
/// that produced the weights it evaluated; 0.0 before the first update (step 0).
/// Readers that map `{step: learning_rate}` over every entry (SOURCE does) then
/// read the trainer's own rates. Returns how many entries were filled.
///
/// Evaluations stay entries of their own rather than merged into the step's
/// training entry: at a stage boundary two evaluations (the ending stage's and
/// the starting stage's) share one step, and merging would collide their keys.
pub fn fill_learning_rates(entries: &mut [Value]) -> usize {
    let mut trained: BTreeMap<u64, Value> = BTreeMap::new();
    for e in entries.iter() {
        if let (Some(step), Some(lr)) = (
            e.get("step").and_then(Value::as_u64),
            e.get("learning_rate").filter(|v| v.is_number()),
        ) {
            trained.insert(step, lr.clone());
        }
    }
    let mut filled = 0;
    for e in entries.iter_mut() {
        let Some(step) = e.get("step").and_then(Value::as_u64) else {
            continue;
        };
        let Some(obj) = e.as_object_mut() else {
            continue;
        };
        if obj.contains_key("learning_rate") {
            continue;
        }
        // Step 0 precedes every update; a later step with no training entry (an
        // incomplete history) is left as it is rather than given a made-up rate.
        let lr = match trained.get(&step) {
            Some(lr) => lr.clone(),
            None if step == 0 => Value::from(0.0),
            None => continue,
        };
        obj.insert("learning_rate".to_string(), lr);
        filled += 1;
    }
    filled
}

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

    /// Entries of steps up to and including `step`, in file order, each with a
    /// `learning_rate` ([`fill_learning_rates`]).
    pub fn up_to(&self, step: u64) -> Vec<Map<String, Value>> {
        let mut all: Vec<Value> = self.entries.iter().cloned().map(Value::Object).collect();
        fill_learning_rates(&mut all);
        all.into_iter()
            .filter_map(|e| match e {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .filter(|e| {
                e.get("step")
                    .and_then(Value::as_u64)
                    .is_some_and(|s| s <= step)
            })
            .collect()
    }

    /// Entries without a `learning_rate` (written by a worker before it filled
    /// them in).
    pub fn missing_learning_rates(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| !e.contains_key("learning_rate"))
            .count()
    }

    /// Rewrites the file (atomically) with every entry's `learning_rate` filled in;
    /// returns how many were filled.
    pub fn fill_in_place(&mut self) -> Result<usize> {
        let mut all: Vec<Value> = self.entries.iter().cloned().map(Value::Object).collect();
        let filled = fill_learning_rates(&mut all);
        if filled > 0 {
            crate::atomic::write_json(&self.path, &all)?;
            self.entries = all
                .into_iter()
                .filter_map(|e| match e {
                    Value::Object(m) => Some(m),
                    _ => None,
                })
                .collect();
        }
        Ok(filled)
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
    fn evaluations_get_their_steps_learning_rate() {
        let (_d, mut h) = history(json!([
            {"step": 0, "eval_loss": 3.1, "stage": "pretrain"},
            {"step": 1, "learning_rate": 0.1, "loss": 3.0},
            {"step": 2, "learning_rate": 0.2, "loss": 2.5},
            {"step": 2, "eval_loss": 2.4, "stage": "pretrain"},
            {"step": 2, "eval_loss": 2.7, "stage": "sft"},
            {"step": 3, "learning_rate": 0.3, "loss": 2.0},
        ]));
        assert_eq!(h.missing_learning_rates(), 3);
        let lrs = |entries: &[Map<String, Value>]| -> Vec<(u64, f64)> {
            entries
                .iter()
                .map(|e| {
                    (
                        e["step"].as_u64().unwrap(),
                        e["learning_rate"].as_f64().unwrap(),
                    )
                })
                .collect()
        };
        let want = vec![(0, 0.0), (1, 0.1), (2, 0.2), (2, 0.2), (2, 0.2), (3, 0.3)];
        assert_eq!(lrs(&h.up_to(3)), want);
        assert_eq!(h.fill_in_place().unwrap(), 3);
        let again = LogHistory::read(h.path.parent().unwrap()).unwrap();
        assert_eq!(again.missing_learning_rates(), 0);
        assert_eq!(lrs(&again.entries), want);
        // The evaluations keep their own keys.
        assert_eq!(again.entries[4]["stage"], "sft");
        assert_eq!(again.entries[4]["eval_loss"], 2.7);
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
