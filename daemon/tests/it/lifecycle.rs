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
        "  stale_after_s: 300\n  startup_grace_s: 1\n  on_stall: alert",
        "[train]",
    );
    let daemon = env.serve();
    env.start(&[]);
    wait_until(Duration::from_secs(5), "the worker to hang", || {
        env.status()["training"]["step"].as_u64() == Some(2)
    });
    // Older than the 1 s the reload will set, still within the 300 s in force.
    wait_until(Duration::from_secs(10), "a heartbeat 2 s old", || {
        env.status()["training"]["heartbeat_age_s"].as_u64() >= Some(2)
    });
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
        // The three crashes are alike; max_same_failure is not what this test is about.
        "  max_restarts: 1\n  restart_reset_after_s: 1\n  max_same_failure: 9",
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
        // A start in the same second gets the next second's run name (run::create_run).
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

    // The worker's last line, then the daemon's own lines of the end (the final
    // checkpoint, the pipeline finished) in the pipeline log.
    let logs = env.tcp("GET", "/logs?lines=5", None, None);
    assert_eq!(logs.status, 200);
    assert_eq!(logs.body.lines().count(), 5, "{}", logs.body);
    assert!(logs.body.contains("finished at step 20"), "{}", logs.body);
    let out = env.run(&["logs", "-n", "5"]);
    assert!(
        stdout(&out).contains("finished at step 20"),
        "{}",
        stdout(&out)
    );

    let out = env.run(&["checkpoints", "--run", &oldest]);
    // The data root's line, then the run's four checkpoints.
    assert_eq!(stdout(&out).lines().count(), 1 + 4, "{}", stdout(&out));
    // Deleting asks first. Without a terminal it needs --yes: one line, nothing deleted.
    let out = env.run(&["prune", "--keep-runs", "1"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--yes") && err.contains(&oldest), "{err}");
    let oldest_dir = env.data_root.join("checkpoints").join(&oldest);
    assert!(oldest_dir.is_dir());
    // On a terminal it names what it would delete and waits: "n" keeps everything.
    let prune = || {
        let mut c = env.cmd();
        c.args(["prune", "--keep-runs", "1"]);
        c
    };
    let no = run_on_terminal(&mut prune(), "[y/N]", "n", Duration::from_secs(30));
    assert!(!no.status.success(), "{}", no.output);
    assert!(no.output.contains(&oldest), "{}", no.output);
    assert!(no.output.contains("nothing was changed"), "{}", no.output);
    assert!(oldest_dir.is_dir());
    let yes = run_on_terminal(&mut prune(), "[y/N]", "y", Duration::from_secs(30));
    assert!(yes.status.success(), "{}", yes.output);
    assert!(yes.output.contains("removed"), "{}", yes.output);
    assert!(!oldest_dir.exists());
    // The running daemon deleted it (it knows the run it may be starting), and says so.
    let said = "prune --keep-runs 1: removed 1 old run(s)";
    let log = env.log_with(said, Duration::from_secs(30));
    assert!(
        log.lines().any(|l| l.contains(said) && l.contains(&oldest)),
        "{log}"
    );
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
    let before = env.train_calls().len();
    env.start(&["--resume", "latest"]);
    // The launch runs off the actor: the call is recorded once the worker runs.
    wait_until(Duration::from_secs(30), "the resumed train step", || {
        env.train_calls().len() > before
    });
    let calls = env.train_calls();
    let resume = calls
        .get(before)
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

/// The operator's contract for `start`: a start without `--resume` never walks away
/// from an unfinished run silently (the CLI and the API refuse it with the command
/// that resumes and the flag that starts over); `--fresh` asks first on a terminal
/// and needs `--yes` without one; `--resume` takes a checkpoint's weights file.
#[test]
fn start_refuses_to_walk_away_from_a_resumable_run() {
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
    env.wait_checkpoints(1, Duration::from_secs(20));
    env.stop_saved();
    let first_run = env.run_dir();
    let trains = env.train_calls().len();

    let out = env.run(&["start"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out);
    println!("$ lavenderd start\n{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let run_name = first_run.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        err.contains(&run_name)
            && err.contains("`lavenderd start --resume latest`")
            && err.contains("`lavenderd start --fresh`"),
        "{err}"
    );
    let r = env.uds("POST", "/pipeline/start", Some("{}")).unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    let body = r.json();
    assert_eq!(body["resume_command"], "lavenderd start --resume latest");
    assert_eq!(body["fresh_command"], "lavenderd start --fresh");
    assert_eq!(
        format!("lavenderd: {}", body["error"].as_str().unwrap()),
        err.trim()
    );
    assert_eq!(env.train_calls().len(), trains, "nothing was started");
    assert_eq!(env.pipeline_json()["state"], "stopped");

    // Starting over walks away from that run: without a terminal it needs --yes.
    let out = env.run(&["start", "--fresh"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--yes") && err.contains(&run_name), "{err}");
    assert_eq!(env.train_calls().len(), trains);
    // On a terminal it asks; "y" starts a new run from step 0.
    let next_train_call = |before: usize| {
        wait_until(Duration::from_secs(20), "the worker to start", || {
            env.train_calls().len() > before
        });
        env.train_calls().last().unwrap().clone()
    };
    let fresh = run_on_terminal(
        env.cmd().args(["start", "--fresh"]),
        "[y/N]",
        "y",
        Duration::from_secs(30),
    );
    assert!(fresh.status.success(), "{}", fresh.output);
    assert!(fresh.output.contains(&run_name), "{}", fresh.output);
    let call = next_train_call(trains);
    assert!(!call.iter().any(|a| a == "--resume"), "{call:?}");
    assert_ne!(env.run_dir(), first_run);
    env.wait_checkpoints(1, Duration::from_secs(20));
    env.stop_saved();

    // --resume with a weights file continues from the checkpoint that holds it.
    let ckpt = lavender::checkpoint::latest_complete(&first_run)
        .unwrap()
        .unwrap()
        .path;
    let weights = ckpt.join("model.safetensors");
    let before = env.train_calls().len();
    env.start(&["--resume", weights.to_str().unwrap()]);
    let call = next_train_call(before);
    let at = call.iter().position(|a| a == "--resume").unwrap();
    assert_eq!(call[at + 1], ckpt.display().to_string());
    env.stop_saved();
    // A file outside any checkpoint: one line, nothing started.
    let stray = env.dir.path().join("notes.txt");
    std::fs::write(&stray, "x").unwrap();
    let before = env.train_calls().len();
    let out = env.run(&["start", "--resume", stray.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("notes.txt"), "{err}");
    assert_eq!(env.train_calls().len(), before);
}

/// `start --force --from-step STEP` runs a finished chunk's steps again from STEP; a
/// finished step whose inputs changed (a config key it reads) runs again by itself
/// with every step after it; `start` says which and why.
#[test]
fn finished_steps_run_again_when_forced_or_when_their_inputs_changed() {
    let mut env = Env::new(
        &["--total-steps", "10", "--step-ms", "5"],
        "",
        "[downloads, train]",
    );
    let daemon = env.serve();
    env.start(&[]);
    env.wait_state("finished", Duration::from_secs(20));
    let count = |step: &str| {
        env.calls()
            .iter()
            .filter(|a| a.iter().any(|x| x == step))
            .count()
    };
    assert_eq!((count("downloads"), count("train")), (1, 1));

    let out = env.run(&["start", "--force", "--from-step", "trian"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("trian") && err.contains("downloads, train"),
        "{err}"
    );

    let out = env.start(&["--force", "--from-step", "train"]);
    let said = stdout(&out);
    println!("$ lavenderd start --force --from-step train\n{said}");
    assert!(
        said.contains(
            "--force: the steps from train on run again; finished steps run again: train"
        ),
        "{said}"
    );
    env.wait_state("finished", Duration::from_secs(20));
    assert_eq!((count("downloads"), count("train")), (1, 2));
    // The step run again is told to rebuild even what is up to date.
    let forced: Vec<serde_json::Value> = env
        .call_records()
        .into_iter()
        .filter(|c| c["argv"].as_array().unwrap().iter().any(|a| a == "train"))
        .map(|c| c["force"].clone())
        .collect();
    assert_eq!(
        forced,
        [serde_json::Value::Null, serde_json::Value::from("true")]
    );

    // Nothing changed: a start finds everything done and runs nothing.
    env.start(&[]);
    env.wait_state("finished", Duration::from_secs(20));
    assert_eq!((count("downloads"), count("train")), (1, 2));

    // The seed is an input of training, not of downloads.
    let text = std::fs::read_to_string(&env.config).unwrap();
    std::fs::write(&env.config, format!("{text}seed: 7\n")).unwrap();
    send_signal(daemon as i32, 1);
    env.log_with("config reloaded", Duration::from_secs(10));
    let out = env.start(&[]);
    let said = stdout(&out);
    assert!(
        said.contains("train runs again: seed changed since it ran at"),
        "{said}"
    );
    env.wait_state("finished", Duration::from_secs(20));
    assert_eq!((count("downloads"), count("train")), (1, 3));
}

/// `lavenderd daemon stop` ends a daemon `lavenderd start` left in the background, as
/// SIGTERM does: the worker saves first, then both are gone.
#[test]
fn daemon_stop_ends_a_detached_daemon_after_the_worker_saved() {
    let env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "10",
            "--checkpoint-every",
            "1000",
        ],
        "",
        "[train]",
    );
    env.start(&[]);
    env.wait_step(3, Duration::from_secs(20));
    let daemon: i32 = std::fs::read_to_string(env.state_dir().join("lavenderd.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let worker = env.worker_pid().unwrap();
    assert!(alive(daemon) && alive(worker));

    let out = env.run(&["daemon", "stop"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("lavenderd stopped"), "{said}");
    assert!(!alive(daemon) && !alive(worker));
    let saved = events(&env.run_dir())
        .into_iter()
        .any(|e| e["kind"] == "final_saved");
    assert!(saved, "the worker saved before the daemon exited");
    assert!(said.contains("newest checkpoint"), "{said}");

    let out = env.run(&["daemon", "stop"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
}

/// Lines of the fake worker's chatter in `text`, as (step, line) numbers.
fn chatter(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("fake-worker: chatter step ")?;
            let (step, line) = rest.split_once(" line ")?;
            Some((step.parse().ok()?, line.parse().ok()?))
        })
        .collect()
}

/// The relay processes writing `log`, by pid.
fn relays_of(log: &std::path::Path) -> Vec<i32> {
    let log = log.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|&pid| {
            let argv = cmdline(pid);
            argv.iter().any(|a| a == "log-relay") && argv.contains(&log)
        })
        .filter(|&pid| alive(pid))
        .collect()
}

/// A chatty worker's log rotates by size (`logging.max_bytes`, `logging.keep`) while
/// `lavenderd logs -f` follows it: the follower shows every line once, in order,
/// across the rotations; `logs -n` reaches back into the rotated files.
#[test]
fn logs_follow_reads_across_rotations_of_the_pipeline_log() {
    let env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "20",
            "--chatter",
            "4",
            "--checkpoint-every",
            "1000",
        ],
        "logging:\n  max_bytes: 4096\n  keep: 10",
        "[train]",
    );
    env.start(&[]);
    let log = std::path::PathBuf::from(env.pipeline_json()["log_file"].as_str().unwrap());
    wait_until(Duration::from_secs(20), "the worker's first lines", || {
        chatter(&std::fs::read_to_string(&log).unwrap_or_default()).len() > 10
    });
    let out_path = env.dir.path().join("follow.txt");
    let mut follower = env
        .cmd()
        .args(["logs", "-f", "-n", "5"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rotated = |k: u32| std::path::PathBuf::from(format!("{}.{k}", log.display()));
    // Each file holds about 90 lines (two seconds of them): wait for five rotations.
    wait_until(Duration::from_secs(60), "five rotations", || {
        rotated(5).exists()
    });
    env.stop_saved();
    // What the worker wrote last, from the files themselves.
    let last = *chatter(&std::fs::read_to_string(&log).unwrap())
        .last()
        .or(chatter(&std::fs::read_to_string(rotated(1)).unwrap()).last())
        .unwrap();
    wait_until(Duration::from_secs(10), "the follower to catch up", || {
        chatter(&std::fs::read_to_string(&out_path).unwrap_or_default()).last() == Some(&last)
    });
    let _ = follower.kill();
    let _ = follower.wait();

    let seen = chatter(&std::fs::read_to_string(&out_path).unwrap());
    let expected: Vec<(u64, u64)> = (seen[0].0..=last.0)
        .flat_map(|s| (0..4).map(move |i| (s, i)))
        .skip_while(|p| *p != seen[0])
        .collect();
    assert_eq!(seen, expected, "every line once, in order");
    assert!(rotated(5).exists() && !rotated(11).exists(), "keep 10");
    for k in 1..=5 {
        let size = std::fs::metadata(rotated(k)).unwrap().len();
        assert!(
            size <= 4096 + 64,
            "{} is {size} bytes",
            rotated(k).display()
        );
    }
    // `logs -n` takes from the rotated files when the current one has fewer lines.
    let current = std::fs::read_to_string(&log).unwrap().lines().count();
    let n = current + 20;
    let out = env.run(&["logs", "-n", &n.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The data root's line, then the n lines.
    assert_eq!(stdout(&out).lines().count(), 1 + n);
    wait_until(
        Duration::from_secs(10),
        "the relay to end with the worker",
        || relays_of(&log).is_empty(),
    );
}

/// The worker's output goes through a relay of its own, outside the daemon: a
/// daemon killed mid-run leaves the worker logging, and rotating, into the same log;
/// the relay ends when the worker does.
#[test]
fn a_worker_that_outlives_the_daemon_keeps_logging_through_its_relay() {
    let mut env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "5",
            "--chatter",
            "4",
            "--checkpoint-every",
            "1000",
        ],
        "logging:\n  max_bytes: 4096\n  keep: 2",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    let log = std::path::PathBuf::from(env.pipeline_json()["log_file"].as_str().unwrap());
    let worker = env.worker_pid().unwrap();
    wait_until(Duration::from_secs(20), "the relay", || {
        relays_of(&log).len() == 1
    });
    let relay = relays_of(&log)[0];
    assert_ne!(relay, worker);
    env.kill_daemons();
    let newest = |log: &std::path::Path| {
        chatter(&std::fs::read_to_string(log).unwrap_or_default())
            .last()
            .map(|p| p.0)
            .unwrap_or(0)
    };
    let at_kill = newest(&log);
    let rotated = std::path::PathBuf::from(format!("{}.1", log.display()));
    let before = std::fs::metadata(&rotated)
        .ok()
        .map(|m| m.modified().unwrap());
    wait_until(
        Duration::from_secs(20),
        "the worker to go on logging",
        || {
            newest(&log) > at_kill + 200
                && std::fs::metadata(&rotated)
                    .ok()
                    .map(|m| m.modified().unwrap())
                    != before
        },
    );
    assert!(alive(worker) && alive(relay));
    send_signal(-worker, 9);
    wait_until(
        Duration::from_secs(10),
        "the relay to end with the worker",
        || !alive(relay),
    );
}

/// The daemon's own log, when it writes it (a daemon `start` left in the background),
/// rotates too; afterwards its stderr is the new file, so nothing printed outside
/// the log lines goes to a rotated one.
#[test]
fn the_daemon_log_rotates_and_its_stderr_follows() {
    let env = Env::new(
        &["--total-steps", "100000", "--step-ms", "20"],
        "logging:\n  max_bytes: 1024\n  keep: 5",
        "[train]",
    );
    env.start(&[]);
    let daemon: i32 = std::fs::read_to_string(env.state_dir().join("lavenderd.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let log = env.state_dir().join("lavenderd.log");
    let reloads = || -> usize {
        (0..=5)
            .map(|k| {
                let p = if k == 0 {
                    log.clone()
                } else {
                    std::path::PathBuf::from(format!("{}.{k}", log.display()))
                };
                std::fs::read_to_string(p)
                    .unwrap_or_default()
                    .matches("config reloaded")
                    .count()
            })
            .sum()
    };
    for n in 1..=25 {
        send_signal(daemon, 1);
        wait_until(Duration::from_secs(10), "the reload's line", || {
            reloads() == n
        });
    }
    let first = std::path::PathBuf::from(format!("{}.1", log.display()));
    assert!(first.exists(), "the daemon log rotated");
    for k in 1..=5 {
        let p = std::path::PathBuf::from(format!("{}.{k}", log.display()));
        if let Ok(m) = std::fs::metadata(&p) {
            assert!(
                m.len() <= 1024 + 256,
                "{} is {} bytes",
                p.display(),
                m.len()
            );
        }
    }
    assert_eq!(
        std::fs::read_link(format!("/proc/{daemon}/fd/2")).unwrap(),
        std::fs::canonicalize(&log).unwrap(),
        "stderr is the current log"
    );
    let out = env.run(&["daemon", "stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
