//! A real MLflow tracking server for a test (`mlflow server` from `.venv`, a SQLite
//! store in the test's own folder, on 127.0.0.1), and what it holds, read back with
//! MLflow's own Python client.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::python::{require_modules, venv_tool};

pub struct Mlflow {
    pub uri: String,
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    _tmp: tempfile::TempDir,
}

/// The client's read of one experiment: every run with its status, tags and each
/// metric's full history (`[[step, value], …]` in logging order).
const READ: &str = r#"
import json, sys
from mlflow.tracking import MlflowClient
c = MlflowClient(sys.argv[1])
e = c.get_experiment_by_name(sys.argv[2])
runs = []
if e is not None:
    for r in c.search_runs([e.experiment_id], max_results=1000):
        metrics = {}
        for k in r.data.metrics:
            h = c.get_metric_history(r.info.run_id, k)
            metrics[k] = [[m.step, m.value, m.timestamp] for m in sorted(h, key=lambda m: (m.timestamp, m.step))]
        runs.append({"run_id": r.info.run_id, "status": r.info.status, "tags": r.data.tags,
                     "params": r.data.params, "metrics": metrics})
print(json.dumps({"runs": runs}))
"#;

/// How long a server's start may take before a test gives up on it.
const UP: Duration = Duration::from_secs(360);

impl Mlflow {
    /// Starts a server and waits until it answers (its first start makes the store).
    pub fn start() -> Mlflow {
        require_modules(&["mlflow"]);
        let tmp = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut m = Mlflow {
            uri: format!("http://127.0.0.1:{port}"),
            port,
            dir: tmp.path().to_path_buf(),
            child: None,
            _tmp: tmp,
        };
        m.up();
        m
    }

    /// Starts the server (again, after [`Mlflow::kill`]: the store is kept).
    pub fn up(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .unwrap();
        let child = Command::new(venv_tool("mlflow"))
            .args(["server", "--host", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .arg("--backend-store-uri")
            .arg(format!(
                "sqlite:///{}",
                self.dir.join("mlflow.db").display()
            ))
            .arg("--default-artifact-root")
            .arg(self.dir.join("artifacts"))
            .args(["--workers", "1"])
            // The server's background jobs (mlflow 3: a job runner and eight huey
            // consumers, each a Python process importing mlflow) serve none of what
            // the tests log; without them a start is 2 processes, not 10 (16 s to
            // answer against 40 s here, at load 8).
            .env("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start mlflow server");
        let pid = child.id() as i32;
        self.child = Some(child);
        let health = format!("{}/health", self.uri);
        // A server's start imports mlflow and its web stack: tens of CPU-seconds,
        // several times that on two cores that four other tests share.
        let deadline = std::time::Instant::now() + UP;
        while !curl_ok(&health) {
            assert!(crate::alive(pid), "mlflow server exited:\n{}", self.log());
            assert!(
                std::time::Instant::now() < deadline,
                "mlflow server (pid {pid}) not answering {health} after {UP:?}; its log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGKILL to the server's process group, waiting until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::send_signal(-(child.id() as i32), 9);
            let _ = child.wait();
        }
        let health = format!("{}/health", self.uri);
        crate::wait_until(Duration::from_secs(10), "mlflow server gone", || {
            !curl_ok(&health)
        });
    }

    /// SIGSTOP (`true`) or SIGCONT to the server's process group: a server that
    /// takes connections and answers none, then answers what queued meanwhile.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.child.as_ref().expect("a running server").id() as i32;
        crate::send_signal(-pid, if frozen { 19 } else { 18 });
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// The `tracking:` section's `mlflow:` line for `experiment`.
    pub fn yaml(&self, experiment: &str, metrics: &str) -> String {
        format!(
            "  mlflow: {{uri: '{}', experiment: '{experiment}', metrics: {metrics}}}\n",
            self.uri
        )
    }

    /// Every run of `experiment`, read with MLflow's client.
    pub fn runs(&self, experiment: &str) -> Vec<Value> {
        let out = Command::new(venv_tool("python"))
            .args(["-c", READ, &self.uri, experiment])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "MLflow client read failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["runs"].as_array().cloned().unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Mlflow {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::send_signal(-(child.id() as i32), 9);
            let _ = child.wait();
        }
    }
}

fn curl_ok(url: &str) -> bool {
    Command::new("curl")
        .args(["-sf", "-m", "2", "-o", "/dev/null", url])
        .status()
        .is_ok_and(|s| s.success())
}

/// `metrics[key]`'s steps in logging order.
pub fn steps(run: &Value, key: &str) -> Vec<u64> {
    run["metrics"][key]
        .as_array()
        .map(|h| h.iter().filter_map(|p| p[0].as_u64()).collect())
        .unwrap_or_default()
}

/// The run's `lavender.event.*` tags' texts, in order.
pub fn events(run: &Value) -> Vec<String> {
    let mut tags: Vec<(String, String)> = run["tags"]
        .as_object()
        .map(|t| {
            t.iter()
                .filter(|(k, _)| k.starts_with("lavender.event."))
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    tags.sort();
    tags.into_iter().map(|(_, v)| v).collect()
}
