//! `POST /daemon/reload`: the config file read again (as on SIGHUP); the answer
//! names each changed key and when it takes effect.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// When a changed key takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TakesEffect {
    /// At once: the supervisor's timings, the status, retention, log rotation.
    Now,
    /// When the daemon next starts a worker (a restart, the next step).
    NextWorker,
    /// At the next `lavenderd start`: what the pipeline computes.
    NextStart,
    /// When the daemon itself starts again (`lavenderd daemon restart`).
    NextDaemon,
}

impl fmt::Display for TakesEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TakesEffect::Now => "now",
            TakesEffect::NextWorker => "at the next worker start",
            TakesEffect::NextStart => "at the next `lavenderd start`",
            TakesEffect::NextDaemon => {
                "when the daemon starts again (lavenderd daemon restart keeps the worker training)"
            }
        })
    }
}

/// One changed key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyChange {
    pub key: String,
    pub takes_effect: TakesEffect,
}

/// What a reload read and what changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// The file read; `None`: the daemon runs on the built-in defaults and its
    /// environment.
    pub file: Option<PathBuf>,
    pub changes: Vec<KeyChange>,
}

impl ReloadReport {
    /// The lines a reload logs and `lavenderd reload` prints: the file, then one line
    /// per changed key.
    pub fn lines(&self) -> Vec<String> {
        let name = self
            .file
            .as_ref()
            .map_or("the built-in defaults".to_string(), |f| {
                f.display().to_string()
            });
        let mut out = vec![match self.changes.len() {
            0 => format!("config reloaded from {name}: nothing changed"),
            n => format!("config reloaded from {name}: {n} key(s) changed"),
        }];
        out.extend(
            self.changes
                .iter()
                .map(|c| format!("  {}: takes effect {}", c.key, c.takes_effect)),
        );
        out
    }
}
