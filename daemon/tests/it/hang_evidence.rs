//! A hung worker's evidence, taken before it is killed: a Python protocol worker
//! frozen by SIGSTOP leaves `<run>/incidents/<time>-hang/` holding its Python stack
//! (py-spy), naming the function it stopped in, its `/proc` state and open files,
//! the last heartbeat and log lines; the bundle is named in the recovery, the push
//! and the decision log. The hang → restart time with and without the capture.
//! `lavenderd debug stacks` takes the same on demand.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lavender_testkit::python::venv_tool;
use lavender_testkit::*;
use serde_json::Value;

const SIGSTOP: i32 = 19;

/// A protocol worker that spends its steps in `train_one_step`.
const WORKER: &str = r#"
import time
from lavender_protocol import Worker


def train_one_step(w, step):
    time.sleep(0.05)
    w.step(step, loss=1.0)


def main():
    w = Worker.from_argv()
    w.total_steps = 1000000
    step = w.resume.step if w.resume is not None else 0
    with w:
        w.start(step=step)
        while not w.should_stop():
            step += 1
            train_one_step(w, step)
        return w.stopped()


raise SystemExit(main())
"#;

fn python_env(dir: &Path, evidence: bool) -> Env {
    let script = dir.join(format!("hang_worker_{evidence}.py"));
    std::fs::write(&script, WORKER).unwrap();
    Env::python(
        &[venv_tool("python"), script.display().to_string()],
        &format!(
            "  stale_after_s: 2\n  startup_grace_s: 60\n  stall_kill_grace_s: 0.5\n  hang_evidence: {evidence}"
        ),
        "",
    )
}

fn hang_bundles(run_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(run_dir.join("incidents"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with("-hang"))
                .collect()
        })
        .unwrap_or_default()
}

/// Freezes the running worker and waits for its restart; the worker's pid and the
/// seconds from the freeze to the restart.
fn freeze_until_restarted(env: &Env) -> (i32, Duration) {
    env.wait_step(3, Duration::from_secs(60));
    let pid = env.worker_pid().unwrap();
    send_signal(pid, SIGSTOP);
    let frozen = Instant::now();
    wait_until(Duration::from_secs(60), "the hung worker restarted", || {
        let st = env.status();
        st["pipeline"]["recovery"]["reason"] == "hung"
            && st["pipeline"]["pid"]
                .as_i64()
                .is_some_and(|p| p != pid as i64)
    });
    (pid, frozen.elapsed())
}

#[test]
fn a_sigstopped_python_worker_leaves_its_python_stack_before_it_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = python_env(dir.path(), true);
    env.serve();
    env.start(&[]);
    let (pid, with_capture) = freeze_until_restarted(&env);
    let run_dir = env.run_dir();
    let bundles = hang_bundles(&run_dir);
    assert_eq!(bundles.len(), 1, "{bundles:?}");
    let bundle = &bundles[0];
    let stack = std::fs::read_to_string(bundle.join(format!("pid-{pid}/python-stack.txt")))
        .unwrap_or_else(|e| {
            panic!(
                "{e}: {:?}",
                std::fs::read_dir(bundle)
                    .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
            )
        });
    assert!(stack.contains("train_one_step ("), "{stack}");
    let index: Value = read_json(&bundle.join("bundle.json"));
    let p = &index["processes"][0];
    assert_eq!(p["pid"], pid, "{index:#}");
    assert!(
        p["state"].as_str().unwrap().starts_with('T'),
        "stopped: {index:#}"
    );
    assert!(
        p["stack_tool"].as_str().unwrap().contains("--nonblocking"),
        "{index:#}"
    );
    assert_eq!(p["stack"]["result"], "ok", "{index:#}");
    for f in ["status", "wchan", "kernel-stack", "fds.txt"] {
        assert!(bundle.join(format!("pid-{pid}/{f}")).is_file(), "{f}");
    }
    let fds = std::fs::read_to_string(bundle.join(format!("pid-{pid}/fds.txt"))).unwrap();
    assert!(fds.contains("0 -> "), "{fds}");
    assert!(bundle.join("heartbeat.json").is_file());
    let tail = std::fs::read_to_string(bundle.join("log-tail.txt")).unwrap();
    assert!(!tail.is_empty());
    assert!(index["nvidia_smi"]["result"].is_string(), "{index:#}");
    let took = index["took_s"].as_f64().unwrap();
    assert!(took < 10.0, "{took}");
    // Named where a person looks: the recovery (status), the push (log), the decision log.
    let st = env.status();
    let message = st["pipeline"]["recovery"]["message"].as_str().unwrap();
    let named = format!("evidence in {}", bundle.display());
    assert!(message.contains(&named), "{message}");
    env.log_with(
        &format!("ALERT step train: {message}"),
        Duration::from_secs(10),
    );
    let out = env.run(&["incidents", "--json"]);
    let decisions: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(decisions[0]["kind"], "hang_kill", "{decisions:#}");
    assert_eq!(decisions[0]["bundle"], bundle.display().to_string());

    // The same hang without the capture, for the time it adds.
    let dir2 = tempfile::tempdir().unwrap();
    let mut bare = python_env(dir2.path(), false);
    bare.serve();
    bare.start(&[]);
    let (_, without_capture) = freeze_until_restarted(&bare);
    assert!(hang_bundles(&bare.run_dir()).is_empty());
    eprintln!(
        "hang evidence: freeze -> restart {:.2} s with the capture (capture {took:.2} s), {:.2} s without",
        with_capture.as_secs_f64(),
        without_capture.as_secs_f64()
    );
    assert!(
        with_capture < without_capture + Duration::from_secs(10),
        "{with_capture:?} vs {without_capture:?}"
    );
}

/// `lavenderd debug stacks` on a running worker: a bundle, the worker untouched.
#[test]
fn debug_stacks_takes_the_evidence_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = python_env(dir.path(), true);
    env.serve();
    env.start(&[]);
    env.wait_step(2, Duration::from_secs(60));
    let pid = env.worker_pid().unwrap();
    let out = env.run(&["debug", "stacks"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    let path = PathBuf::from(said.lines().last().unwrap().trim());
    assert!(
        path.starts_with(env.run_dir().join("incidents"))
            && path.is_dir()
            && path.to_string_lossy().ends_with("-stacks"),
        "{said}"
    );
    let stack = std::fs::read_to_string(path.join(format!("pid-{pid}/python-stack.txt"))).unwrap();
    assert!(stack.contains("main ("), "{stack}");
    assert!(alive(pid));
    assert_eq!(env.status()["pipeline"]["pid"], pid);
}
