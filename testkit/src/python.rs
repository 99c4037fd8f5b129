//! Python workers under the real `lavenderd`: the `.venv` interpreter, the
//! repository's examples and `python/` library, a config running them, and reads
//! of what they leave in the run directory.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Env;
use crate::daemon::{Lavenderd, yaml_strings};
use crate::repo;
use crate::run_dir::events;

/// `<repo>/.venv/bin/<tool>`, which the set-up installs.
pub fn venv_tool(tool: &str) -> String {
    let path = repo().join(".venv/bin").join(tool);
    assert!(
        path.is_file(),
        "{} is missing: run `make setup` (it creates .venv with torch), then scripts/hf-setup.sh",
        path.display()
    );
    path.display().to_string()
}

/// Fails (never skips) when the venv lacks a module the test drives. The modules are
/// looked up, not imported: importing torch, transformers or lightning costs seconds
/// of CPU, paid again by the script the test runs (which fails on its own import if a
/// module is installed but broken).
pub fn require_modules(modules: &[&str]) {
    const FIND: &str = "import importlib.util, sys\n\
                        missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]\n\
                        sys.exit(', '.join(missing) if missing else 0)";
    let out = Command::new(venv_tool("python"))
        .args(["-c", FIND])
        .args(modules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the .venv lacks {}: run scripts/hf-setup.sh (transformers, accelerate) and \
         `pip install -e python/`",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// The Hugging Face example at its smallest: `max_steps` steps of batches of 4
/// windows of 32 bytes, a save every `save_steps`, no evaluation on the way.
pub fn hf_example(max_steps: u64, save_steps: u64) -> Vec<String> {
    require_modules(&["torch", "transformers", "accelerate"]);
    smallest(
        "hf-trainer/train.py",
        max_steps,
        save_steps,
        &["--eval-steps", "100000"],
    )
}

/// The Lightning example at its smallest: `max_steps` steps of batches of 4 windows
/// of 32 bytes, a save every `save_steps`, no validation.
pub fn lightning_example(max_steps: u64, save_steps: u64) -> Vec<String> {
    require_modules(&["torch", "lightning"]);
    smallest(
        "lightning/train.py",
        max_steps,
        save_steps,
        &["--val-every", "0"],
    )
}

/// An example script (`examples/<script>`) at its smallest, with `more` flags.
fn smallest(script: &str, max_steps: u64, save_steps: u64, more: &[&str]) -> Vec<String> {
    let (max_steps, save_steps) = (max_steps.to_string(), save_steps.to_string());
    let mut argv = vec![venv_tool("python"), example(script)];
    argv.extend(
        ["--max-steps", &max_steps, "--save-steps", &save_steps]
            .iter()
            .chain(more)
            .chain(&["--batch-size", "4", "--seq-len", "32"])
            .map(|s| s.to_string()),
    );
    argv
}

pub fn example(path: &str) -> String {
    repo().join("examples").join(path).display().to_string()
}

impl Env {
    /// A daemon whose worker is `command` (the library from this checkout on
    /// PYTHONPATH). `yaml` is added at the top level.
    pub fn python(command: &[String], supervisor: &str, yaml: &str) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let pythonpath = repo().join("python/src").display().to_string();
        let text = format!(
            "steps: [train]\nworker:\n  command: [{}]\n  env: {{PYTHONPATH: {pythonpath:?}}}\n\
             supervisor:\n  listen: 127.0.0.1:0\n  poll_interval_ms: 50\n  stop_timeout_s: 60\n{supervisor}\n{yaml}\n",
            yaml_strings(command)
        );
        let mut daemon = Lavenderd::in_dir(dir.path(), &text, "python");
        daemon.backoff_ms = "200".into();
        Env { dir, daemon }
    }

    /// A daemon running the repository's example config `config` (relative to the
    /// repository) as written: what a test needs besides (a port of its own, a quick
    /// poll, restarts, this checkout's library) comes through environment variables a
    /// user could set too, never by rewriting the config.
    pub fn example(config: &str, worker_name: &str) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let mut daemon = Lavenderd::in_dir(dir.path(), "", worker_name);
        daemon.config = repo().join(config);
        daemon.backoff_ms = "200".into();
        let pythonpath = repo().join("python/src").display().to_string();
        daemon.env = [
            ("LAVENDER__SUPERVISOR__LISTEN", "127.0.0.1:0"),
            ("LAVENDER__SUPERVISOR__POLL_INTERVAL_MS", "50"),
            ("LAVENDER__SUPERVISOR__MAX_RESTARTS", "2"),
            ("PYTHONPATH", pythonpath.as_str()),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Env { dir, daemon }
    }

    /// The worker's log (stdout/stderr of every spawn), for failure messages.
    pub fn worker_log(&self) -> String {
        let mut text = String::new();
        if let Ok(entries) = std::fs::read_dir(self.data_root.join("logs")) {
            for e in entries.flatten() {
                text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

/// Every one of `ranks` torchrun ranks logged that it stopped, all after `step`
/// (examples/torchrun/train.py prints `stopped after step N`). Returns the lines.
pub fn assert_ranks_stopped_at(env: &Env, ranks: usize, step: u64) -> Vec<String> {
    let stopped: Vec<String> = env
        .worker_log()
        .lines()
        .filter(|l| l.contains("stopped after step"))
        .map(str::to_string)
        .collect();
    assert_eq!(stopped.len(), ranks, "every rank stopped: {stopped:?}");
    assert!(
        stopped
            .iter()
            .all(|l| l.ends_with(&format!("stopped after step {step}"))),
        "at the same step {step}: {stopped:?}"
    );
    stopped
}

/// Waits for an event of the run that `pred` accepts; returns it.
pub fn wait_event(
    env: &Env,
    run_dir: &Path,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(e) = events(run_dir).into_iter().find(|e| pred(e)) {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\nworker log:\n{}",
            env.worker_log()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// (name, step) of the run's complete checkpoints, oldest first, as lavender lists them.
pub fn complete(run_dir: &Path) -> Vec<(String, u64)> {
    lavender::checkpoint::list_run_checkpoints(run_dir)
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.state.step))
        .collect()
}

pub fn step_of(event: &Value) -> u64 {
    event["step"].as_u64().expect("an event with a step")
}

pub fn resume_arg(argv: &[String]) -> Option<String> {
    argv.iter()
        .position(|a| a == "--resume")
        .map(|i| argv[i + 1].clone())
}

/// A line of the test's transcript (shown with --nocapture).
pub fn say(line: impl AsRef<str>) {
    eprintln!("[transcript] {}", line.as_ref());
}

/// The daemon's retention of `run` once its worker finished at `newest`: at most
/// `keep` + the best complete checkpoints, said in the daemon's log, nothing of it
/// written into the run, the newest kept, nothing half-deleted left. Returns what is
/// left and the log's retention lines.
pub fn assert_retention_by_daemon(
    env: &Env,
    run: &Path,
    keep: usize,
    newest: u64,
) -> (Vec<(String, u64)>, Vec<String>) {
    crate::wait_until(Duration::from_secs(10), "the last retention pass", || {
        complete(run).len() <= keep + 1
    });
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    let retain_lines: Vec<String> = log
        .lines()
        .filter(|l| l.contains("RETAIN dropped"))
        .map(str::to_string)
        .collect();
    assert!(!retain_lines.is_empty(), "{log}");
    let by_worker: Vec<Value> = events(run)
        .into_iter()
        .filter(|e| e["kind"] == "retention")
        .collect();
    assert!(by_worker.is_empty(), "{by_worker:?}");
    let left = complete(run);
    assert!(left.len() <= keep + 1, "{left:?}");
    assert!(
        left.iter().any(|(_, s)| *s == newest),
        "the newest stays: {left:?}"
    );
    let hidden: Vec<String> = std::fs::read_dir(run)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-drop-"))
        .collect();
    assert!(
        hidden.is_empty(),
        "nothing half-deleted is left: {hidden:?}"
    );
    (left, retain_lines)
}

/// The worker that replaced `killed`, and the step of the checkpoint of `run` it
/// resumed from.
pub fn restarted_in(env: &Env, run: &Path, killed: i32, timeout: Duration) -> (i32, u64) {
    crate::wait_until(timeout, "a restarted worker", || {
        env.worker_pid().is_some_and(|p| p != killed)
    });
    let restarted = env.worker_pid().unwrap();
    let resume = resume_arg(&crate::process::cmdline(restarted)).expect("the restart resumes");
    assert!(resume.starts_with(run.to_str().unwrap()), "{resume}");
    let step = lavender::checkpoint::resolve_resume(&resume, &env.data_root)
        .unwrap()
        .state
        .step;
    (restarted, step)
}

/// Starts the example under `env`, waits for step 12, and stops it: the worker saves
/// on SIGTERM (`final_saved`, before `max_steps`), `lavenderd stop` names that
/// checkpoint, the last heartbeat says `stopping` at its step, the pipeline is
/// stopped. Returns the run's folder, the save's event and the checkpoint's name.
pub fn started_then_stopped_saved(
    env: &Env,
    label: &str,
    max_steps: u64,
    timeout: Duration,
) -> (std::path::PathBuf, Value, String) {
    env.start(&[]);
    let run = env.run_dir();
    let st = env.wait_step(12, timeout);
    assert_eq!(st["pipeline"]["state"], "running", "{st:#}");
    say(format!(
        "{label}: started, status running at step {}",
        st["training"]["step"]
    ));
    let said = env.stop_saved();
    let saved = wait_event(env, &run, timeout, "final_saved", |e| {
        e["kind"] == "final_saved"
    });
    let step = step_of(&saved);
    let name = Path::new(saved["path"].as_str().expect("a save names its path"))
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(said.contains(&name), "stop names {name}: {said}");
    assert!((12..max_steps).contains(&step), "{step}");
    let hb: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("heartbeat.json")).unwrap())
            .unwrap();
    assert_eq!(
        (hb["state"].as_str(), hb["step"].as_u64()),
        (Some("stopping"), Some(step))
    );
    env.wait_state("stopped", timeout);
    say(format!(
        "{label}: stop saved {name} at step {step}; lavenderd stop said: {}",
        said.trim()
    ));
    (run, saved, name)
}

/// The pipeline finishes with the worker at `max_steps`, its last save of `run` the
/// final one at that step.
pub fn assert_finished_with_final_save(env: &Env, run: &Path, max_steps: u64, timeout: Duration) {
    let st = env.wait_state("finished", timeout);
    assert_eq!(st["training"]["step"].as_u64(), Some(max_steps), "{st:#}");
    let last = events(run)
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "final_saved");
    assert_eq!(last.map(|e| step_of(&e)), Some(max_steps));
}
