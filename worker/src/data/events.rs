//! Milestone events appended to `<run_dir>/events.jsonl`.
//!
//! Mirrors `lavender::events` (core-api.md: `{ts, kind, message, ...fields}`, one object a
//! line) until that module is on main; then this becomes `pub use lavender::events::*`.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Map, Value};

pub const FILE: &str = "events.jsonl";

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub ts: String,
    pub kind: String,
    pub message: String,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Event {
    pub fn new(kind: &str, message: impl Into<String>) -> Event {
        Event {
            ts: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            kind: kind.to_string(),
            message: message.into(),
            fields: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Serialize) -> Event {
        self.fields.insert(
            key.to_string(),
            serde_json::to_value(value).unwrap_or(Value::Null),
        );
        self
    }
}

/// One line, appended with O_APPEND so concurrent writers never interleave within a line.
pub fn append(run_dir: &Path, event: &Event) -> Result<()> {
    let path = run_dir.join(FILE);
    let mut line = serde_json::to_vec(event)?;
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("could not open {}", path.display()))?;
    f.write_all(&line)
        .with_context(|| format!("could not append to {}", path.display()))
}
