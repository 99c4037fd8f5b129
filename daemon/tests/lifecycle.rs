//! Daemon lifecycle and the remaining routes: SIGHUP reload, `start --foreground`
//! with Ctrl-C, restart-count reset after progress, runs/checkpoints/logs, prune,
//! and a stopped pipeline's data root moved elsewhere.

use std::process::Stdio;
use std::time::Duration;

use lavender_testkit::*;

#[test]
fn sighup_reloads_the_config_without_touching_the_worker() {
    let mut env = Env::new(
        &[
            "--hang-after",
            "2",
            "--step-ms",
            "10",
            "--total-steps",
            "1000",
        ],
        "  stale_after_s: 300\n  startup_grace_s: 0",
        "[train]",
    );
    let daemon = env.serve();
    env.start(&[]);
    wait_until(Duration::from_secs(5), "the worker to hang", || {
        env.status()["training"]["step"].as_u64() == Some(2)
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        env.status()["training"]["heartbeat_stale"],
        false,
        "300 s have not passed"
    );
    let worker = env.worker_pid().unwrap();

    let text = std::fs::read_to_string(&env.config).unwrap();
    std::fs::write(
        &env.config,
        text.replace("stale_after_s: 300", "stale_after_s: 1"),
    )
    .unwrap();
    send_signal(daemon as i32, 1);
    wait_until(
        Duration::from_secs(5),
        "the reloaded stale_after_s to apply",
        || env.status()["training"]["heartbeat_stale"] == true,
    );
    let st = env.status();
    assert_eq!(st["pipeline"]["pid"], worker, "the worker was not touched");
    assert_eq!(st["pipeline"]["restarts"], 0);
}

#[test]
fn start_foreground_runs_in_the_terminal_and_ctrl_c_stops_gracefully() {
    let env = Env::new(
        &["--total-steps", "100000", "--step-ms", "10"],
        "",
        "[train]",
    );
    let mut child = env
        .cmd()
        .args(["start", "--foreground"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.daemon_log()).unwrap())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "training progress", || {
        env.uds("GET", "/status", None)
            .and_then(|r| r.json()["training"]["step"].as_u64())
            .unwrap_or(0)
            >= 3
    });
    let worker = env.worker_pid().unwrap();
    send_signal(child.id() as i32, 2);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!alive(worker));
    assert_eq!(env.pipeline_json()["state"], "stopped");
    // The terminal is told what the stop saved; the daemon log has it too.
    let view = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(view.contains("the stop saved"), "{view}");
    let log = std::fs::read_to_string(env.state_dir().join("lavenderd.log")).unwrap();
    assert!(log.contains("the stop saved"), "{log}");
}

#[test]
fn start_foreground_exits_when_the_pipeline_finishes() {
    let env = Env::new(
        &["--total-steps", "10", "--step-ms", "5"],
        "",
        "[downloads, train]",
    );
    let out = env.run(&["start", "--foreground"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(env.pipeline_json()["state"], "finished");
}

#[test]
fn the_restart_count_resets_after_enough_progress() {
    // Each run crashes after ~1.2 s of progress; with a 1 s reset window every crash
    // is the first, so max_restarts 1 is never exceeded.
    let mut env = Env::new(
        &[
            "--crash-after",
            "60",
            "--crash-times",
            "3",
            "--step-ms",
            "20",
            "--total-steps",
            "400",
            "--checkpoint-every",
            "10",
        ],
        "  max_restarts: 1\n  restart_reset_after_s: 1",
        "[train]",
    );
    env.backoff_ms = "50".into();
    env.serve();
    env.start(&[]);
    wait_until(
        Duration::from_secs(25),
        "three crashes and restarts",
        || env.train_calls().len() >= 4,
    );
    let st = env.status();
    assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
    assert_eq!(st["pipeline"]["restarts"], 1);
    assert!(env.run(&["stop"]).status.success());
}

#[test]
fn runs_checkpoints_logs_and_prune() {
    let mut env = Env::new(
        &[
            "--total-steps",
            "20",
            "--step-ms",
            "5",
            "--checkpoint-every",
            "5",
        ],
        "",
        "[train]",
    );
    env.serve();
    for _ in 0..2 {
        env.start(&[]);
        env.wait_state("finished", Duration::from_secs(10));
        // Done-markers make the next start a no-op: clear them for a second run.
        std::fs::remove_dir_all(env.state_dir().join("done")).unwrap();
        std::thread::sleep(Duration::from_millis(1100)); // run names have one-second resolution
    }
    let runs = env.tcp("GET", "/runs", None, None).json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["checkpoints"], 4);
    let newest = runs[0]["name"].as_str().unwrap().to_string();
    let oldest = runs[1]["name"].as_str().unwrap().to_string();

    let ckpts = env
        .tcp("GET", &format!("/checkpoints?run={oldest}"), None, None)
        .json();
    assert_eq!(ckpts.as_array().unwrap().len(), 4);
    assert_eq!(ckpts[3]["step"], 20);
    assert_eq!(
        env.tcp("GET", "/checkpoints?run=run-nope", None, None)
            .status,
        404
    );

    let logs = env.tcp("GET", "/logs?lines=2", None, None);
    assert_eq!(logs.status, 200);
    assert_eq!(logs.body.lines().count(), 2, "{}", logs.body);
    assert!(logs.body.contains("finished at step 20"), "{}", logs.body);
    let out = env.run(&["logs", "-n", "1"]);
    assert!(
        stdout(&out).contains("finished at step 20"),
        "{}",
        stdout(&out)
    );

    let out = env.run(&["checkpoints", "--run", &oldest]);
    assert_eq!(stdout(&out).lines().count(), 4, "{}", stdout(&out));
    let out = env.run(&["prune", "--keep-runs", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&oldest), "{}", stdout(&out));
    let out = env.run(&["runs"]);
    assert!(
        stdout(&out).contains(&newest) && !stdout(&out).contains(&oldest),
        "{}",
        stdout(&out)
    );
}

/// People move a long run's data root to another disk: once stopped and moved, its
/// status (without a daemon and from a daemon on the new root) still shows the run's
/// checkpoints, the training step and the steps done, and `--resume latest`
/// continues from the moved checkpoint.
#[test]
fn a_moved_data_root_keeps_its_checkpoints_and_step() {
    let mut env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "10",
            "--checkpoint-every",
            "5",
        ],
        "",
        "[downloads, train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_checkpoints(2, Duration::from_secs(10));
    env.stop_saved();
    let before = env.status();
    let checkpoints = before["training"]["checkpoints"].as_u64().unwrap();
    let latest = before["training"]["latest_checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    let step = before["training"]["step"].as_u64().unwrap();
    assert!(step >= 10, "{before:#}");
    let old_root = env.data_root.clone();
    assert!(
        !env.pipeline_json_raw()["run_dir"]
            .as_str()
            .unwrap()
            .starts_with('/'),
        "the run directory is recorded relative to the data root"
    );
    env.kill_daemons();

    let moved = env.dir.path().join("other-disk/lavender");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&old_root, &moved).unwrap();
    env.data_root = moved.clone();

    let shows_the_run = |st: &serde_json::Value, from: &str| {
        assert_eq!(st["pipeline"]["state"], "stopped", "{from}: {st:#}");
        assert_eq!(st["training"]["checkpoints"], checkpoints, "{from}: {st:#}");
        assert_eq!(
            st["training"]["latest_checkpoint"], latest,
            "{from}: {st:#}"
        );
        assert_eq!(st["training"]["step"], step, "{from}: {st:#}");
        assert_eq!(st["steps"]["downloads"], "done", "{from}: {st:#}");
        assert_eq!(st["steps"]["train"], "pending", "{from}: {st:#}");
    };
    let out = env.run(&["status", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let offline: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_valid(&offline);
    shows_the_run(&offline, "status --json without a daemon");
    let out = env.run(&["status"]);
    assert!(
        stdout(&out).contains(&latest) && stdout(&out).contains(&step.to_string()),
        "{}",
        stdout(&out)
    );

    env.serve();
    shows_the_run(&env.status(), "GET /status on the moved root");
    env.start(&["--resume", "latest"]);
    let calls = env.train_calls();
    let resume = calls
        .last()
        .and_then(|argv| argv.iter().skip_while(|a| *a != "--resume").nth(1))
        .expect("the resumed train step got --resume")
        .clone();
    assert!(
        resume.starts_with(moved.to_str().unwrap()) && resume.ends_with(&latest),
        "resumes from the moved checkpoint {latest}: {resume}"
    );
    env.stop_saved();
}

#[test]
fn keep_runs_prunes_old_runs_when_a_pipeline_finishes() {
    let mut env = Env::new(
        &["--total-steps", "10", "--step-ms", "5"],
        "  keep_runs: 1",
        "[train]",
    );
    env.serve();
    for round in 0..2 {
        env.start(&[]);
        env.wait_state("finished", Duration::from_secs(10));
        if round == 0 {
            std::fs::remove_dir_all(env.state_dir().join("done")).unwrap();
            std::thread::sleep(Duration::from_millis(1100));
        }
    }
    // Pruning follows the transition to finished; give it a moment.
    wait_until(Duration::from_secs(5), "old runs to be pruned", || {
        env.tcp("GET", "/runs", None, None)
            .json()
            .as_array()
            .map(Vec::len)
            == Some(1)
    });
    let runs = env.tcp("GET", "/runs", None, None).json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        runs[0]["path"].as_str().unwrap(),
        env.run_dir().to_str().unwrap(),
        "the newest run is kept"
    );
}

#[test]
fn logs_follow_prints_new_lines() {
    let mut env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "10",
            "--checkpoint-every",
            "20",
        ],
        "",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    let out_path = env.dir.path().join("follow.out");
    let mut follower = env
        .cmd()
        .args(["logs", "-f", "-n", "0"])
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "followed log lines", || {
        std::fs::read_to_string(&out_path)
            .unwrap()
            .contains("fake-worker: saved")
    });
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(env.run(&["stop"]).status.success());
}

#[test]
fn config_check_names_a_bad_key() {
    let env = Env::new(&[], "  max_restart: 3", "[train]");
    let out = env.run(&["config", "check"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("max_restart") && err.contains("lavender.yaml"),
        "{err}"
    );
    let good = Env::new(&[], "", "[train]");
    let out = good.run(&["config", "check"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("supervisor:"), "{}", stdout(&out));
}

/// lavender-worker is one process on one device: `config check` refuses several
/// Slurm tasks of it, naming the multi-GPU path, and accepts them for a torchrun script.
#[test]
fn config_check_refuses_several_tasks_of_lavender_worker() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = "launch:\n  backend: slurm\n  slurm:\n    ntasks: 4\n    nodes: 1\n";
    let daemon = Lavenderd::in_dir(
        dir.path(),
        &format!("worker:\n  command: [lavender-worker]\n{slurm}"),
        "lavender-worker",
    );
    let out = daemon.run(&["config", "check"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("lavender.yaml:6:13: launch.slurm.ntasks: 4 tasks would start 4 copies of lavender-worker")
            && err.contains("torchrun")
            && err.contains("docs/PYTHON.md"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let torchrun = Lavenderd::in_dir(
        dir.path(),
        &format!("worker:\n  command: [torchrun, --nproc-per-node=4, train.py]\n{slurm}"),
        "train.py",
    );
    let out = torchrun.run(&["config", "check"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
