//! `log_history.json`: every step's `{step, epoch, learning_rate, loss, grad_norm}`
//! in Hugging Face's key names (plus evaluation entries such as `eval_loss`).
//!
//! Steps append one JSON line to the sidecar `log_history.jsonl` (cheap, O(1));
//! each checkpoint materializes the array atomically, so the file is complete at
//! every checkpoint. The array is written as Hugging Face's readers (and bergson's
//! SOURCE, which maps every entry's `step` to its `learning_rate`) take it: each
//! evaluation on its step's training entry, or with that step's rate
//! ([`lavender_export::for_hf_readers`]); the sidecar keeps them as logged. On resume the sidecar is cut back to the checkpoint's step:
//! steps after it were lost with the process and are trained again.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use lavender::log_history::{FILE, SIDECAR};

pub struct History {
    sidecar: PathBuf,
    array: PathBuf,
    out: BufWriter<File>,
}

impl History {
    /// Opens the run's history. With `keep_until = Some(step)` (a resume), entries
    /// after `step` are dropped, and when the run directory is new the entries up to
    /// `step` are carried over from `previous_run`'s history.
    pub fn open(
        run_dir: &Path,
        keep_until: Option<u64>,
        previous_run: Option<&Path>,
    ) -> Result<History> {
        let sidecar = run_dir.join(SIDECAR);
        let array = run_dir.join(FILE);
        let mut entries = read_entries(&sidecar)?;
        if entries.is_empty()
            && let Some(prev) = previous_run.filter(|p| *p != run_dir)
        {
            entries = read_entries(&prev.join(SIDECAR))?;
        }
        if let Some(last) = keep_until {
            entries.retain(|e| {
                e.get("step")
                    .and_then(Value::as_u64)
                    .is_some_and(|s| s <= last)
            });
        } else {
            entries.clear();
        }
        // Rewritten once per process: drops lost steps and any torn last line.
        let mut text = Vec::new();
        for e in &entries {
            serde_json::to_writer(&mut text, e)?;
            text.push(b'\n');
        }
        lavender::atomic::write_file(&sidecar, &text)?;
        let file = OpenOptions::new()
            .append(true)
            .open(&sidecar)
            .with_context(|| format!("could not open {} for appending", sidecar.display()))?;
        Ok(History {
            sidecar,
            array,
            out: BufWriter::new(file),
        })
    }

    pub fn append(&mut self, entry: &Value) -> Result<()> {
        serde_json::to_writer(&mut self.out, entry)?;
        self.out
            .write_all(b"\n")
            .with_context(|| format!("could not append to {}", self.sidecar.display()))
    }

    pub fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .with_context(|| format!("could not write {}", self.sidecar.display()))
    }

    /// Writes `log_history.json` (the whole array, as HF readers take it) atomically.
    pub fn materialize(&mut self) -> Result<()> {
        self.flush()?;
        let entries: Vec<serde_json::Map<String, Value>> = read_entries(&self.sidecar)?
            .into_iter()
            .filter_map(|e| match e {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .collect();
        let (entries, _) = lavender_export::for_hf_readers(&entries);
        lavender::atomic::write_json(&self.array, &entries)?;
        Ok(())
    }
}

/// The sidecar's entries; a torn last line (a kill mid-append) is ignored.
fn read_entries(path: &Path) -> Result<Vec<Value>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("could not read {}", path.display())),
    };
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.with_context(|| format!("could not read {}", path.display()))?;
        if let Ok(v) = serde_json::from_str::<Value>(&line) {
            out.push(v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn appends_materializes_and_cuts_back_on_resume() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::open(dir.path(), None, None).unwrap();
        for step in 1..=5u64 {
            h.append(&json!({"step": step, "learning_rate": 0.1 * step as f64}))
                .unwrap();
        }
        h.materialize().unwrap();
        let arr: Vec<Value> =
            serde_json::from_slice(&std::fs::read(dir.path().join(FILE)).unwrap()).unwrap();
        assert_eq!(arr.len(), 5);
        assert_eq!(arr[4]["step"], 5);
        drop(h);

        // Resume from step 3: steps 4 and 5 are gone, new ones follow.
        let mut h = History::open(dir.path(), Some(3), None).unwrap();
        h.append(&json!({"step": 4, "learning_rate": 9.0})).unwrap();
        h.materialize().unwrap();
        let arr: Vec<Value> =
            serde_json::from_slice(&std::fs::read(dir.path().join(FILE)).unwrap()).unwrap();
        let steps: Vec<u64> = arr.iter().map(|e| e["step"].as_u64().unwrap()).collect();
        assert_eq!(steps, vec![1, 2, 3, 4]);
        assert_eq!(arr[3]["learning_rate"], 9.0);

        // A new run directory resuming from this run carries the history over.
        let next = tempfile::tempdir().unwrap();
        let mut h = History::open(next.path(), Some(2), Some(dir.path())).unwrap();
        h.materialize().unwrap();
        let arr: Vec<Value> =
            serde_json::from_slice(&std::fs::read(next.path().join(FILE)).unwrap()).unwrap();
        assert_eq!(arr.len(), 2);
    }

    #[test]
    fn every_materialized_entry_has_a_learning_rate_and_the_sidecar_is_as_logged() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::open(dir.path(), None, None).unwrap();
        h.append(&json!({"step": 0, "epoch": 0.0, "eval_loss": 3.1, "stage": "pretrain"}))
            .unwrap();
        for step in 1..=2u64 {
            h.append(
                &json!({"step": step, "epoch": 0.1, "learning_rate": 0.1 * step as f64,
                "loss": 3.0, "stage": "pretrain"}),
            )
            .unwrap();
        }
        h.append(&json!({"step": 2, "epoch": 0.1, "eval_loss": 2.9, "stage": "pretrain"}))
            .unwrap();
        h.append(&json!({"step": 2, "epoch": 0.0, "eval_loss": 3.5, "stage": "sft"}))
            .unwrap();
        h.materialize().unwrap();
        let arr: Vec<Value> =
            serde_json::from_slice(&std::fs::read(dir.path().join(FILE)).unwrap()).unwrap();
        let rates: Vec<(u64, f64)> = arr
            .iter()
            .map(|e| {
                (
                    e["step"].as_u64().unwrap(),
                    e["learning_rate"].as_f64().unwrap(),
                )
            })
            .collect();
        // Step 0's evaluation precedes every update; step 2's joins its training
        // entry; the next stage's starting evaluation keeps its own entry.
        assert_eq!(rates, vec![(0, 0.0), (1, 0.1), (2, 0.2), (2, 0.2)]);
        assert_eq!(arr[2]["eval_loss"], 2.9);
        assert_eq!(arr[3]["stage"], "sft");
        let sidecar = std::fs::read_to_string(dir.path().join(SIDECAR)).unwrap();
        assert_eq!(sidecar.lines().count(), 5);
        assert!(!sidecar.lines().next().unwrap().contains("learning_rate"));
    }

    #[test]
    fn a_torn_last_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(SIDECAR),
            "{\"step\": 1}\n{\"step\": 2, \"lo",
        )
        .unwrap();
        let mut h = History::open(dir.path(), Some(10), None).unwrap();
        h.materialize().unwrap();
        let arr: Vec<Value> =
            serde_json::from_slice(&std::fs::read(dir.path().join(FILE)).unwrap()).unwrap();
        assert_eq!(arr, vec![json!({"step": 1})]);
    }
}
