//! Test harness: a tempdir data root, a config pointing at the fake worker, the
//! real `lavenderd` binary, and small blocking HTTP clients for TCP and the socket.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const LAVENDERD: &str = env!("CARGO_BIN_EXE_lavenderd");
pub const FAKE_WORKER: &str = env!("CARGO_BIN_EXE_lavender-fake-worker");

pub struct Env {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub data_root: PathBuf,
    pub backoff_ms: String,
    daemons: Vec<Child>,
}

pub struct Http {
    pub status: u16,
    pub body: String,
}

impl Http {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

impl Env {
    /// `worker_args`: fault flags for the fake worker; `supervisor`/`steps`: YAML snippets.
    pub fn new(worker_args: &[&str], supervisor: &str, steps: &str) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let data_root = dir.path().join("data");
        let config = dir.path().join("lavender.yaml");
        let mut command = vec![FAKE_WORKER.to_string()];
        command.extend(worker_args.iter().map(|s| s.to_string()));
        let command: Vec<String> = command.iter().map(|s| format!("{s:?}")).collect();
        let yaml = format!(
            "steps: {steps}\nworker:\n  command: [{}]\nsupervisor:\n  listen: 127.0.0.1:0\n  poll_interval_ms: 50\n  stop_timeout_s: 10\n{supervisor}\n",
            command.join(", ")
        );
        std::fs::write(&config, yaml).unwrap();
        Env {
            dir,
            config,
            data_root,
            backoff_ms: "100,200,300".into(),
            daemons: Vec::new(),
        }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.data_root.join("state")
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(LAVENDERD);
        c.arg("--config")
            .arg(&self.config)
            .arg("--data-root")
            .arg(&self.data_root)
            .env("LAVENDER_TEST_BACKOFF_MS", &self.backoff_ms)
            .env_remove("LAVENDER_DATA_ROOT")
            .env_remove("LAVENDER_CONFIG")
            .env_remove("LAVENDER_SCALE")
            .env_remove("LAVENDER_CHUNK");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).stdin(Stdio::null()).output().unwrap()
    }

    pub fn daemon_log(&self) -> PathBuf {
        self.dir.path().join("daemon.log")
    }

    /// Starts `lavenderd serve` and waits until it answers.
    pub fn serve(&mut self) -> u32 {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.daemon_log())
            .unwrap();
        let child = self
            .cmd()
            .arg("serve")
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
        let mut s = std::net::TcpStream::connect(self.addr()).unwrap();
        request(&mut s, method, path, body, token).unwrap()
    }

    pub fn uds(&self, method: &str, path: &str, body: Option<&str>) -> Option<Http> {
        let mut s =
            std::os::unix::net::UnixStream::connect(self.state_dir().join("lavenderd.sock"))
                .ok()?;
        request(&mut s, method, path, body, None)
    }

    pub fn status(&self) -> Value {
        let r = self.tcp("GET", "/status", None, None);
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_valid(&v);
        v
    }

    pub fn pipeline_json(&self) -> Value {
        let text =
            std::fs::read_to_string(self.state_dir().join("pipeline.json")).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(Value::Null)
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

    pub fn train_calls(&self) -> Vec<Vec<String>> {
        self.calls()
            .into_iter()
            .filter(|a| a.iter().any(|x| x == "train"))
            .collect()
    }

    pub fn run_dir(&self) -> PathBuf {
        PathBuf::from(self.pipeline_json()["run_dir"].as_str().expect("a run dir"))
    }

    pub fn worker_pid(&self) -> Option<i32> {
        self.pipeline_json()["worker"]["pid"]
            .as_i64()
            .map(|p| p as i32)
    }

    pub fn kill_daemons(&mut self) {
        for mut d in self.daemons.drain(..) {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.kill_daemons();
        // A daemon started in the background by `lavenderd start`.
        if let Ok(pid) = std::fs::read_to_string(self.state_dir().join("lavenderd.pid"))
            && let Ok(pid) = pid.trim().parse::<i32>()
            && pid > 0
            && std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.contains("lavenderd"))
        {
            unsafe { libc_kill(pid, 9) };
        }
        if let Ok(pid) = std::fs::read_to_string(self.data_root.join("fake-helper.pid"))
            && let Ok(pid) = pid.trim().parse::<i32>()
            && std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.contains("sleep"))
        {
            unsafe { libc_kill(pid, 9) };
        }
        if let Some(pid) = self.worker_pid()
            && std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.contains("fake-worker"))
        {
            unsafe { libc_kill(-pid, 9) };
        }
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

pub fn send_signal(pid: i32, sig: i32) {
    unsafe { libc_kill(pid, sig) };
}

pub fn alive(pid: i32) -> bool {
    // Zombies count as dead.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

fn request<S: Read + Write>(
    s: &mut S,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> Option<Http> {
    let body = body.unwrap_or("");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head
        .lines()
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some(Http { status, body })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub fn schema() -> &'static jsonschema::Validator {
    static V: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/status.schema.json");
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        jsonschema::validator_for(&schema).unwrap()
    })
}

pub fn assert_valid(status: &Value) {
    let errors: Vec<String> = schema()
        .iter_errors(status)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "status violates the schema: {errors:?}\n{status:#}"
    );
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
