//! What a reload (SIGHUP, `lavenderd reload`) does with each changed key: when it
//! takes effect. A running pipeline keeps the config it started with
//! (`state/pipeline-config.yaml`, which its worker restarts read too), so the keys of
//! what it computes apply from the next `start`; the supervisor's timings, the status
//! and retention apply at once; how a worker is started applies to the next worker
//! started; what the daemon binds or builds once (its addresses, the API's access,
//! the notification channels, the file watcher, the data root) waits for the daemon's
//! next start (`lavenderd daemon restart` keeps the worker training).

use std::path::PathBuf;

use lavender::config::Config;
use lavender_api::{KeyChange, ReloadReport, TakesEffect};

/// The rule of when a changed key takes effect; the API carries the answer.
pub trait TakesEffectRule {
    /// By key (a dotted path as [`lavender::config::changed_keys`] gives it).
    fn of(key: &str) -> TakesEffect;
}

impl TakesEffectRule for TakesEffect {
    fn of(key: &str) -> TakesEffect {
        let under = |prefix: &str| {
            key == prefix
                || key.starts_with(&format!("{prefix}."))
                || key.starts_with(&format!("{prefix}["))
        };
        if [
            "supervisor.listen",
            "supervisor.allow_non_loopback",
            "supervisor.watcher",
            "supervisor.slowdown",
            "supervisor.drill",
        ]
        .iter()
        .any(|k| under(k))
            || under("api")
            || under("data_root")
            || under("data_root_candidates")
            || (under("notify") && !under("notify.disk_floor_mib"))
            || under("replicate")
            || under("tracking")
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

/// A reload as the daemon keeps it: the report the API answers with, and the
/// config now in force for the daemon's other parts (not sent over the API).
#[derive(Debug, Clone)]
pub struct Reload {
    pub report: ReloadReport,
    pub config: Config,
}

impl Reload {
    pub fn new(file: Option<PathBuf>, before: &Config, after: Config) -> Reload {
        let changes = lavender::config::changed_keys(before, &after)
            .into_iter()
            .map(|key| KeyChange {
                takes_effect: TakesEffect::of(&key),
                key,
            })
            .collect();
        Reload {
            report: ReloadReport { file, changes },
            config: after,
        }
    }

    /// The lines a reload logs (see [`ReloadReport::lines`]).
    pub fn lines(&self) -> Vec<String> {
        self.report.lines()
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
            ("replicate.url", NextDaemon),
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
        let report = Reload::new(Some("/p/l.yaml".into()), &a, b);
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
