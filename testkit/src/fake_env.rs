//! The daemon's usual test subject: a data root in a tempdir, a config running the
//! fake worker (testkit/src/bin/lavender-fake-worker.rs), and `lavenderd`.

use std::ops::{Deref, DerefMut};
use std::path::PathBuf;

use serde_json::Value;

use crate::bins::fake_worker;
use crate::daemon::{Lavenderd, yaml_strings};
use crate::process::{cmdline_has, send_signal};

/// A data root in a tempdir, a config running a worker (the fake one, [`Env::new`];
/// a Python one, [`Env::python`]), and the daemon. Derefs to [`Lavenderd`] for the
/// CLI, the API and the waits.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub(crate) daemon: Lavenderd,
}

impl Deref for Env {
    type Target = Lavenderd;
    fn deref(&self) -> &Lavenderd {
        &self.daemon
    }
}

impl DerefMut for Env {
    fn deref_mut(&mut self) -> &mut Lavenderd {
        &mut self.daemon
    }
}

impl Env {
    /// `worker_args`: fault flags for the fake worker; `supervisor`/`steps`: YAML
    /// snippets (`supervisor` goes under `supervisor:`, indented, and may continue
    /// with further top-level sections).
    pub fn new(worker_args: &[&str], supervisor: &str, steps: &str) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let mut command = vec![fake_worker().display().to_string()];
        command.extend(worker_args.iter().map(|s| s.to_string()));
        let yaml = format!(
            "steps: {steps}\nworker:\n  command: [{}]\nsupervisor:\n  listen: 127.0.0.1:0\n  poll_interval_ms: 50\n  stop_timeout_s: 10\n{supervisor}\n",
            yaml_strings(&command)
        );
        let daemon = Lavenderd::in_dir(dir.path(), &yaml, "fake-worker");
        Env { dir, daemon }
    }

    /// The fake worker's invocations: argv lists, in order.
    pub fn calls(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(self.data_root.join("fake-worker-calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().to_string())
                    .collect()
            })
            .collect()
    }

    /// The fake worker's invocations as recorded: `{pid, rank, argv, force}` each.
    pub fn call_records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.data_root.join("fake-worker-calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn train_calls(&self) -> Vec<Vec<String>> {
        self.calls()
            .into_iter()
            .filter(|a| a.iter().any(|x| x == "train"))
            .collect()
    }

    fn fake_helper_pid_file(&self) -> PathBuf {
        self.data_root.join("fake-helper.pid")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.daemon.shutdown();
        if let Ok(pid) = std::fs::read_to_string(self.fake_helper_pid_file())
            && let Ok(pid) = pid.trim().parse::<i32>()
            && cmdline_has(pid, "sleep")
        {
            send_signal(pid, 9);
        }
    }
}
