//! Driving the real `lavenderd` binary on a test data root: the CLI, `serve` in
//! the background, requests over TCP and the socket, the status (checked against
//! the schema on every read), waits, and cleanup of every process started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::bins::lavenderd;
use crate::http::{self, Http};
use crate::process::{cmdline_has, send_signal, stderr, stdout};
use crate::schema::assert_valid;
use crate::wait::wait_until;

/// The config layer's name for `supervisor.restart_backoff_s`.
pub const BACKOFF_VAR: &str = "LAVENDER__SUPERVISOR__RESTART_BACKOFF_S";

/// `items` as a YAML flow list of quoted strings: `["a", "b"]` without the brackets.
pub fn yaml_strings<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| format!("{:?}", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"100,200"` (milliseconds) → `"[0.1, 0.2]"` (seconds, as the config takes them).
pub fn backoff_seconds(ms: &str) -> String {
    let waits: Vec<String> = ms
        .split(',')
        .map(|m| {
            format!(
                "{}",
                m.trim().parse::<f64>().expect("backoff in ms") / 1000.0
            )
        })
        .collect();
    format!("[{}]", waits.join(", "))
}

pub struct Lavenderd {
    pub bin: PathBuf,
    pub config: PathBuf,
    pub data_root: PathBuf,
    /// Where `serve` writes its log.
    pub log: PathBuf,
    /// Crash-restart waits in milliseconds (`"100,200"`), given to every command as
    /// `supervisor.restart_backoff_s` through the config's environment layer.
    pub backoff_ms: String,
    /// Extra arguments of `serve` (its hidden timing options).
    pub serve_args: Vec<String>,
    /// Extra environment for every command (injected test switches).
    pub env: Vec<(String, String)>,
    /// A word of the worker's command line: the worker the daemon spawned is
    /// killed at the end only if its command line still contains it.
    pub worker_name: String,
    daemons: Vec<Child>,
}

impl Lavenderd {
    /// `lavenderd` in `dir`: the config `yaml` written to `dir/lavender.yaml`, the
    /// data root `dir/data`, the log `dir/daemon.log`; `worker_name` is what its
    /// worker's processes are called.
    pub fn in_dir(dir: &Path, yaml: &str, worker_name: &str) -> Lavenderd {
        let config = dir.join("lavender.yaml");
        std::fs::write(&config, yaml).unwrap();
        Lavenderd {
            bin: lavenderd(),
            config,
            data_root: dir.join("data"),
            log: dir.join("daemon.log"),
            backoff_ms: "100,200,300".into(),
            serve_args: Vec::new(),
            env: Vec::new(),
            worker_name: worker_name.into(),
            daemons: Vec::new(),
        }
    }

    /// `lavenderd` supervising the real worker in `dir` (see [`Lavenderd::in_dir`]).
    pub fn with_real_worker(dir: &Path, yaml: &str) -> Lavenderd {
        Lavenderd::in_dir(dir, yaml, "lavender-worker")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.data_root.join("state")
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--config")
            .arg(&self.config)
            .arg("--data-root")
            .arg(&self.data_root)
            .env(BACKOFF_VAR, backoff_seconds(&self.backoff_ms))
            .env_remove("LAVENDER_DATA_ROOT")
            .env_remove("LAVENDER_CONFIG")
            .env_remove("LAVENDER_SCALE")
            .env_remove("LAVENDER_CHUNK");
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).stdin(Stdio::null()).output().unwrap()
    }

    pub fn daemon_log(&self) -> PathBuf {
        self.log.clone()
    }

    /// The daemon's log once it holds `line` (within `timeout`). Alerts reach the
    /// log through their own task, after the record (and so the status) already moved.
    pub fn log_with(&self, line: &str, timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(line) {
                return log;
            }
            if std::time::Instant::now() >= deadline {
                let tail: Vec<&str> = log.lines().rev().take(150).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "timed out waiting for {line:?} in the daemon's log; its last lines:\n{}",
                    tail.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Starts `lavenderd serve` and waits until it answers.
    pub fn serve(&mut self) -> u32 {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = self
            .cmd()
            .arg("serve")
            .args(&self.serve_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let pid = child.id();
        self.daemons.push(child);
        let addr = self.state_dir().join("lavenderd.addr");
        wait_until(Duration::from_secs(10), "the daemon to listen", || {
            std::fs::read_to_string(&addr).is_ok() && self.uds("GET", "/healthz", None).is_some()
        });
        pid
    }

    /// `lavenderd start ARGS…`, which must succeed.
    pub fn start(&self, args: &[&str]) -> Output {
        let mut all = vec!["start"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert!(
            out.status.success(),
            "lavenderd {all:?} failed ({:?})\nstdout: {}\nstderr: {}",
            out.status,
            stdout(&out),
            stderr(&out)
        );
        out
    }

    /// `lavenderd stop`, which must exit 0 (it saved); returns what it printed.
    pub fn stop_saved(&self) -> String {
        let out = self.run(&["stop"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "lavenderd stop did not save\nstdout: {}\nstderr: {}",
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    }

    pub fn addr(&self) -> String {
        std::fs::read_to_string(self.state_dir().join("lavenderd.addr")).unwrap()
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.state_dir().join("token"))
            .unwrap()
            .trim()
            .to_string()
    }

    pub fn tcp(&self, method: &str, path: &str, body: Option<&str>, token: Option<&str>) -> Http {
        http::tcp(&self.addr(), method, path, body, token)
    }

    pub fn uds(&self, method: &str, path: &str, body: Option<&str>) -> Option<Http> {
        http::uds(&self.state_dir().join("lavenderd.sock"), method, path, body)
    }

    /// `GET /status` over TCP, checked against the schema.
    pub fn status(&self) -> Value {
        let r = self.tcp("GET", "/status", None, None);
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_valid(&v);
        v
    }

    /// Waits until `pipeline.state` is `state`.
    pub fn wait_state(&self, state: &str, timeout: Duration) -> Value {
        self.wait_status(timeout, &format!("pipeline state {state}"), |s| {
            s["pipeline"]["state"] == state
        })
    }

    /// Waits until `training.step` is at least `step`.
    pub fn wait_step(&self, step: u64, timeout: Duration) -> Value {
        self.wait_status(timeout, &format!("training step {step}"), |s| {
            s["training"]["step"].as_u64().unwrap_or(0) >= step
        })
    }

    /// Waits until the run has at least `n` complete checkpoints.
    pub fn wait_checkpoints(&self, n: u64, timeout: Duration) -> Value {
        self.wait_status(timeout, &format!("{n} checkpoint(s)"), |s| {
            s["training"]["checkpoints"].as_u64().unwrap_or(0) >= n
        })
    }

    /// The status once the last resume's replay check has a verdict (`passed` or
    /// `mismatch`), failing on a failed pipeline.
    pub fn wait_replay_verdict(&self, timeout: Duration) -> Value {
        self.wait_status(timeout, "the replay check's verdict", |st| {
            assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
            matches!(
                st["training"]["replay"]["verdict"].as_str(),
                Some("passed" | "mismatch")
            )
        })
    }

    /// The decision log's lines (`state/decisions.jsonl`).
    pub fn decisions(&self) -> Vec<Value> {
        std::fs::read_to_string(self.state_dir().join("decisions.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The run's resumes trained their replayed steps as the first pass had: no
    /// `resume mismatch` decision, and a replay check that ran said `passed`.
    pub fn assert_no_resume_mismatch(&self) {
        let decisions = self.decisions();
        assert!(
            !decisions.iter().any(|l| l["kind"] == "resume_mismatch"),
            "{decisions:?}"
        );
        let replay = &self.status()["training"]["replay"];
        assert!(
            replay.is_null() || replay["verdict"] == "passed",
            "{replay:#}"
        );
    }

    /// Polls the status until `done` holds for it; returns that status. `done` sees
    /// every status read, so it may also check what must hold all along.
    pub fn wait_status(
        &self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&Value) -> bool,
    ) -> Value {
        let mut last = Value::Null;
        wait_until(timeout, what, || {
            last = self.status();
            done(&last)
        });
        last
    }

    /// `state/pipeline.json` as written (paths inside the data root relative to it).
    pub fn pipeline_json_raw(&self) -> Value {
        let text =
            std::fs::read_to_string(self.state_dir().join("pipeline.json")).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// `state/pipeline.json` with its paths resolved against the data root, as the
    /// daemon reads them.
    pub fn pipeline_json(&self) -> Value {
        let mut v = self.pipeline_json_raw();
        for key in ["run_dir", "log_file", "resume_from"] {
            if let Some(p) = v[key].as_str()
                && !p.starts_with('/')
            {
                v[key] = Value::String(self.data_root.join(p).display().to_string());
            }
        }
        v
    }

    pub fn run_dir(&self) -> PathBuf {
        PathBuf::from(self.pipeline_json()["run_dir"].as_str().expect("a run dir"))
    }

    /// The run folder's name (`run-…`), as the CLI's `--run` and the bucket name it.
    pub fn run_name(&self) -> String {
        self.run_dir()
            .file_name()
            .expect("a run folder")
            .to_string_lossy()
            .into_owned()
    }

    pub fn worker_pid(&self) -> Option<i32> {
        self.pipeline_json()["worker"]["pid"]
            .as_i64()
            .map(|p| p as i32)
    }

    /// SIGTERM to the daemons `serve` started (a service stop, a shutdown), then
    /// waits for each to exit; returns their exit statuses.
    pub fn terminate_daemons(&mut self) -> Vec<std::process::ExitStatus> {
        self.daemons
            .drain(..)
            .map(|mut d| {
                send_signal(d.id() as i32, 15);
                d.wait().unwrap()
            })
            .collect()
    }

    pub fn kill_daemons(&mut self) {
        for mut d in self.daemons.drain(..) {
            let _ = d.kill();
            let _ = d.wait();
        }
    }

    /// Kills the daemons first (so none restarts the worker), then the worker's group.
    pub(crate) fn shutdown(&mut self) {
        self.kill_daemons();
        // A daemon started in the background by `lavenderd start`.
        if let Ok(pid) = std::fs::read_to_string(self.state_dir().join("lavenderd.pid"))
            && let Ok(pid) = pid.trim().parse::<i32>()
            && pid > 0
            && cmdline_has(pid, "lavenderd")
        {
            send_signal(pid, 9);
        }
        if let Some(pid) = self.worker_pid()
            && cmdline_has(pid, &self.worker_name)
        {
            send_signal(-pid, 9);
        }
    }
}

impl Drop for Lavenderd {
    fn drop(&mut self) {
        self.shutdown();
    }
}
