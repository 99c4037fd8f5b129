//! What a reload (SIGHUP, `lavenderd reload`) does with each changed key: when it
//! takes effect. A running pipeline keeps the config it started with
//! (`state/pipeline-config.yaml`, which its worker restarts read too), so the keys of
//! what it computes apply from the next `start`; the supervisor's timings, the status
//! and retention apply at once; how a worker is started applies to the next worker
//! started; what the daemon binds or builds once (its addresses, the API's access,
//! the notification channels, the file watcher, the data root) waits for the daemon's
//! next start (`lavenderd daemon restart` keeps the worker training).

use std::fmt;
use std::path::PathBuf;

use lavender::config::Config;
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

impl TakesEffect {
    /// The rule, by key (a dotted path as [`lavender::config::changed_keys`] gives it).
    pub fn of(key: &str) -> TakesEffect {
        let under = |prefix: &str| {
            key == prefix
                || key.starts_with(&format!("{prefix}."))
                || key.starts_with(&format!("{prefix}["))
        };
        if [
            "supervisor.listen",
            "supervisor.allow_non_loopback",
            "supervisor.watcher",
        ]
        .iter()
        .any(|k| under(k))
            || under("api")
            || under("data_root")
            || under("data_root_candidates")
            || (under("notify") && !under("notify.disk_floor_mib"))
        {
            TakesEffect::NextDaemon
        } else if under("supervisor")
            || under("logging")
            || under("notify.disk_floor_mib")
            || under("training.keep_checkpoints")
        {
            TakesEffect::Now
        } else if under("worker") || under("launch") {
            TakesEffect::NextWorker
        } else {
            TakesEffect::NextStart
        }
    }
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// The file read; `None`: the daemon runs on the built-in defaults and its
    /// environment.
    pub file: Option<PathBuf>,
    pub changes: Vec<KeyChange>,
    /// The config now in force for the daemon's other parts (not sent over the API).
    #[serde(skip)]
    pub config: Option<Config>,
}

impl ReloadReport {
    pub fn new(file: Option<PathBuf>, before: &Config, after: Config) -> ReloadReport {
        let changes = lavender::config::changed_keys(before, &after)
            .into_iter()
            .map(|key| KeyChange {
                takes_effect: TakesEffect::of(&key),
                key,
            })
            .collect();
        ReloadReport {
            file,
            changes,
            config: Some(after),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_section_takes_effect_when_the_docs_say() {
        use TakesEffect::*;
        for (key, when) in [
            ("supervisor.stop_timeout_s", Now),
            ("supervisor.restart_backoff_s[0]", Now),
            ("supervisor.listen", NextDaemon),
            ("logging.max_bytes", Now),
            ("training.keep_checkpoints", Now),
            ("notify.disk_floor_mib", Now),
            ("notify.ntfy.topic", NextDaemon),
            ("api.tokens", NextDaemon),
            ("data_root", NextDaemon),
            ("worker.command", NextWorker),
            ("launch.slurm.partition", NextWorker),
            ("training.stages[0].lr", NextStart),
            ("data.filter.min_chars", NextStart),
            ("model.n_layer", NextStart),
            ("scale", NextStart),
        ] {
            assert_eq!(TakesEffect::of(key), when, "{key}");
        }
        let a = Config::default();
        let mut b = a.clone();
        b.data.filter.min_chars += 1;
        b.supervisor.stop_timeout_s += 1;
        let report = ReloadReport::new(Some("/p/l.yaml".into()), &a, b);
        assert_eq!(
            report.lines(),
            [
                "config reloaded from /p/l.yaml: 2 key(s) changed",
                "  data.filter.min_chars: takes effect at the next `lavenderd start`",
                "  supervisor.stop_timeout_s: takes effect now",
            ]
        );
    }
}
