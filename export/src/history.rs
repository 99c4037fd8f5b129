//! A run's `log_history.json`: the dense per-step record the worker keeps
//! (`{step, epoch, learning_rate, loss, grad_norm}`, plus `eval_*` entries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{ExportError, Result};
use lavender::error::IoContext;
use lavender::log_history::FILE as HISTORY_FILE;

/// The history as Hugging Face readers take it, every entry with a `learning_rate`
/// (SOURCE builds `{step: learning_rate}` over every entry of the history it
/// reads). The worker logs each evaluation as an entry of its own, without a
/// rate; here an evaluation goes onto the training entry of its step, as HF's
/// readers expect, when the keys they share (`step`, `epoch`, `stage`) agree.
/// One that cannot (step 0, before any update; the starting stage's evaluation
/// at a stage boundary, whose `stage` differs) stays an entry of its own with the
/// rate of the update that produced the weights it evaluated, 0.0 at step 0. An
/// evaluation at a later step with no training entry (an incomplete history) is
/// left as it is rather than given a made-up rate.
///
/// Returns the entries and how many evaluations were merged or given a rate.
pub fn for_hf_readers(entries: &[Map<String, Value>]) -> (Vec<Map<String, Value>>, usize) {
    let mut rate: BTreeMap<u64, Value> = BTreeMap::new();
    for e in entries {
        if let (Some(step), Some(lr)) = (
            e.get("step").and_then(Value::as_u64),
            e.get("learning_rate").filter(|v| v.is_number()),
        ) {
            rate.insert(step, lr.clone());
        }
    }
    let mut out: Vec<Map<String, Value>> = Vec::with_capacity(entries.len());
    // The output index of each step's training entry.
    let mut trained_at: BTreeMap<u64, usize> = BTreeMap::new();
    let mut changed = 0;
    for e in entries {
        let Some(step) = e.get("step").and_then(Value::as_u64) else {
            out.push(e.clone());
            continue;
        };
        if e.contains_key("learning_rate") {
            trained_at.insert(step, out.len());
            out.push(e.clone());
            continue;
        }
        if let Some(&i) = trained_at.get(&step) {
            let target = &mut out[i];
            let agree = e.iter().all(|(k, v)| target.get(k).is_none_or(|t| t == v));
            if agree {
                for (k, v) in e {
                    target.entry(k.clone()).or_insert_with(|| v.clone());
                }
                changed += 1;
                continue;
            }
        }
        let lr = match rate.get(&step) {
            Some(lr) => lr.clone(),
            None if step == 0 => Value::from(0.0),
            None => {
                out.push(e.clone());
                continue;
            }
        };
        let mut own = e.clone();
        own.insert("learning_rate".to_string(), lr);
        out.push(own);
        changed += 1;
    }
    (out, changed)
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

    /// Entries of steps up to and including `step`, in file order, as HF readers
    /// take them ([`for_hf_readers`]).
    pub fn up_to(&self, step: u64) -> Vec<Map<String, Value>> {
        let (all, _) = for_hf_readers(&self.entries);
        all.into_iter()
            .filter(|e| {
                e.get("step")
                    .and_then(Value::as_u64)
                    .is_some_and(|s| s <= step)
            })
            .collect()
    }

    /// Evaluation entries without a `learning_rate` (the worker writes them so).
    pub fn missing_learning_rates(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| !e.contains_key("learning_rate"))
            .count()
    }

    /// Rewrites the file atomically as HF readers take it ([`for_hf_readers`]):
    /// SOURCE reads `<run>/log_history.json` for checkpoints exported under the run.
    /// Returns how many evaluations changed. The worker never reads this file back
    /// (its record is the `log_history.jsonl` sidecar) and rewrites it whole at its
    /// next checkpoint; if it did so since [`LogHistory::read`], nothing is written
    /// and `None` is returned.
    pub fn rewrite_for_hf_readers(&mut self) -> Result<Option<usize>> {
        let (all, changed) = for_hf_readers(&self.entries);
        if changed == 0 {
            return Ok(Some(0));
        }
        let now = LogHistory::read(self.path.parent().unwrap_or(Path::new(".")))?;
        if now.entries != self.entries {
            return Ok(None);
        }
        lavender::atomic::write_json(&self.path, &all)?;
        self.entries = all;
        Ok(Some(changed))
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
        // The evaluation joins step 2's training entry.
        assert_eq!(h.up_to(2).len(), 2);
    }

    #[test]
    fn evaluations_join_their_steps_training_entry_or_get_its_rate() {
        let (_d, mut h) = history(json!([
            {"step": 0, "epoch": 0.0, "eval_loss": 3.1, "stage": "pretrain"},
            {"step": 1, "epoch": 0.1, "learning_rate": 0.1, "loss": 3.0, "stage": "pretrain"},
            {"step": 2, "epoch": 0.2, "learning_rate": 0.2, "loss": 2.5, "stage": "pretrain"},
            {"step": 2, "epoch": 0.2, "eval_loss": 2.4, "stage": "pretrain"},
            {"step": 2, "epoch": 0.2, "eval_loss": 2.7, "stage": "sft"},
            {"step": 3, "epoch": 0.3, "learning_rate": 0.3, "loss": 2.0, "stage": "sft"},
            {"step": 5, "epoch": 0.5, "eval_loss": 1.9, "stage": "sft"},
        ]));
        let before = std::fs::read(&h.path).unwrap();
        assert_eq!(h.missing_learning_rates(), 4);
        let lrs = |entries: &[Map<String, Value>]| -> Vec<(u64, Option<f64>)> {
            entries
                .iter()
                .map(|e| {
                    (
                        e["step"].as_u64().unwrap(),
                        e.get("learning_rate").and_then(Value::as_f64),
                    )
                })
                .collect()
        };
        // Step 0 gets 0.0; the pretrain evaluation at step 2 joins step 2's training
        // entry; the sft one (another stage) stays its own with step 2's rate; step 5
        // has no training entry to take a rate from.
        let want = vec![
            (0, Some(0.0)),
            (1, Some(0.1)),
            (2, Some(0.2)),
            (2, Some(0.2)),
            (3, Some(0.3)),
            (5, None),
        ];
        assert_eq!(lrs(&h.up_to(5)), want);
        assert_eq!(lrs(&h.up_to(2)), want[..4]);
        let merged = &h.up_to(2)[2];
        assert_eq!(
            (merged["loss"].as_f64(), merged["eval_loss"].as_f64()),
            (Some(2.5), Some(2.4))
        );
        let own = &h.up_to(2)[3];
        assert_eq!(
            (own["stage"].as_str(), own["eval_loss"].as_f64()),
            (Some("sft"), Some(2.7))
        );
        assert!(own.get("loss").is_none());
        // Reading does not change the file; rewriting does, once.
        assert_eq!(std::fs::read(&h.path).unwrap(), before);
        assert_eq!(h.rewrite_for_hf_readers().unwrap(), Some(3));
        let mut again = LogHistory::read(h.path.parent().unwrap()).unwrap();
        assert_eq!(lrs(&again.entries), want);
        assert_eq!(again.rewrite_for_hf_readers().unwrap(), Some(0));
        // The per-step rates are the same read either way.
        assert_eq!(again.learning_rates(3).unwrap(), vec![0.1, 0.2, 0.3]);
    }

    #[test]
    fn a_history_rewritten_meanwhile_is_left_alone() {
        let (d, mut h) = history(json!([
            {"step": 1, "learning_rate": 0.1, "loss": 3.0},
            {"step": 1, "eval_loss": 2.9},
        ]));
        // The worker materializes its history again after the read.
        let newer = json!([
            {"step": 1, "learning_rate": 0.1, "loss": 3.0},
            {"step": 1, "eval_loss": 2.9},
            {"step": 2, "learning_rate": 0.2, "loss": 2.8},
        ]);
        std::fs::write(d.path().join(HISTORY_FILE), newer.to_string()).unwrap();
        assert_eq!(h.rewrite_for_hf_readers().unwrap(), None);
        assert_eq!(
            std::fs::read_to_string(d.path().join(HISTORY_FILE)).unwrap(),
            newer.to_string()
        );
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
