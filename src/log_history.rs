//! A run's per-step history: the worker appends one JSON line a step to
//! [`SIDECAR`] and materializes [`FILE`], a JSON array, at every checkpoint. The
//! exporter reads the array; the daemon's history route whichever is fresher.

/// The array materialized at each checkpoint (Hugging Face's `log_history`).
pub const FILE: &str = "log_history.json";
/// The per-step sidecar, appended as training goes (the freshest source).
pub const SIDECAR: &str = "log_history.jsonl";
