//! Reads of what a run leaves in its directory.

use std::path::Path;

use serde_json::Value;

/// The run's `events.jsonl`, in order; a line still being written is left out.
pub fn events(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A JSON file the run wrote; panics naming it when it is missing or not JSON.
pub fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The training step of the run's `heartbeat.json`; `None` while there is none or
/// it does not parse.
pub fn heartbeat_step(run_dir: &Path) -> Option<u64> {
    let bytes = std::fs::read(run_dir.join("heartbeat.json")).ok()?;
    serde_json::from_slice::<Value>(&bytes).ok()?["step"].as_u64()
}
