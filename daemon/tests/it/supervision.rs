//! Supervision with real processes: crash → restart from the latest checkpoint with
//! backoff → failed; failures that will repeat fail at once; restarts without
//! progress fail; graceful stop; SIGKILL escalation; daemon death and re-adoption;
//! a hung worker killed and restarted, a long save or a slow start not taken for a
//! hang; SIGTERM to the daemon, and the next daemon resuming the run by itself (a
//! power loss too; an operator's stop stays stopped); the daemon restarting alone
//! (an upgrade) while the worker keeps training.

use std::path::Path;
use std::time::{Duration, Instant};

use lavender_testkit::*;

fn resume_arg(argv: &[String]) -> Option<String> {
    argv.iter()
        .position(|a| a == "--resume")
        .map(|i| argv[i + 1].clone())
}

#[test]
fn crash_restarts_from_latest_with_backoff_then_fails_after_max_restarts() {
    let mut env = Env::new(
        &[
            "--crash-after",
            "12",
            "--checkpoint-every",
            "5",
            "--step-ms",
            "5",
        ],
        "  max_restarts: 2",
        "[train, mine_hard]",
    );
    env.backoff_ms = "300,600".into();
    env.serve();
    let started = Instant::now();
    let out = env.run(&["start"]);
    assert!(out.status.success(), "{}", stderr(&out));

    env.wait_state("failed", Duration::from_secs(20));
    let elapsed = started.elapsed();
    let calls = env.train_calls();
    assert_eq!(
        calls.len(),
        3,
        "first run + max_restarts restarts: {calls:?}"
    );
    assert_eq!(resume_arg(&calls[0]), None);
    let run_dir = env.run_dir();
    for argv in &calls[1..] {
        let resume = resume_arg(argv).expect("a restart resumes");
        let resume = Path::new(&resume);
        assert!(
            resume.starts_with(&run_dir),
            "resumes from this run: {resume:?}"
        );
        assert!(
            resume.join("trainer_state.json").is_file(),
            "from a complete checkpoint"
        );
    }
    // The second restart resumes from a later checkpoint than the first.
    assert_ne!(resume_arg(&calls[1]), resume_arg(&calls[2]));
    assert!(
        elapsed >= Duration::from_millis(300),
        "the first restart at once, the second after 300 ms: {elapsed:?}"
    );

    let st = env.status();
    assert_eq!(st["pipeline"]["running"], false);
    assert_eq!(st["pipeline"]["restarts"], 2);
    assert_eq!(st["steps"]["train"], "failed");
    assert_eq!(
        st["steps"]["mine_hard"], "pending",
        "the pipeline stops at the failure"
    );
    // Alerts are logged in the order they are raised: the last one there, all are.
    let log = env.log_with(
        "ALERT pipeline failed at step train",
        Duration::from_secs(10),
    );
    assert_eq!(log.matches("ALERT step train crashed").count(), 2, "{log}");
}

#[test]
fn a_crash_then_a_successful_restart_finishes_the_pipeline() {
    let mut env = Env::new(
        &[
            "--crash-after",
            "8",
            "--crash-times",
            "1",
            "--total-steps",
            "20",
            "--step-ms",
            "5",
            "--checkpoint-every",
            "5",
        ],
        "",
        "[downloads, train, mine_hard]",
    );
    env.serve();
    env.start(&[]);
    env.wait_state("finished", Duration::from_secs(20));
    let st = env.status();
    assert_eq!(st["pipeline"]["restarts"], 1);
    for step in ["downloads", "train", "mine_hard"] {
        assert_eq!(st["steps"][step], "done", "{st:#}");
    }
    assert_eq!(st["training"]["step"], 20);
    assert_eq!(env.train_calls().len(), 2);
    // Done-markers: a new start of the same chunk has nothing left to do.
    assert!(env.state_dir().join("done/chunk1/train").is_file());
}

#[test]
fn stop_saves_and_reports_the_checkpoint() {
    let mut env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "10",
            "--save-ms",
            "200",
        ],
        "",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_step(5, Duration::from_secs(10));
    let said = env.stop_saved();
    let events = std::fs::read_to_string(env.run_dir().join("events.jsonl")).unwrap();
    let last_saved: serde_json::Value = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .rfind(|e| e["kind"] == "final_saved")
        .expect("the worker saved on SIGTERM");
    let path = last_saved["path"].as_str().unwrap();
    assert!(
        said.contains(path),
        "stop names the checkpoint the stop saved ({path}): {said}"
    );
    assert!(Path::new(path).join("trainer_state.json").is_file());
    let st = env.status();
    assert_eq!(st["pipeline"]["state"], "stopped");
    assert_eq!(st["pipeline"]["running"], false);
    let name = Path::new(path).file_name().unwrap().to_str().unwrap();
    assert_eq!(st["training"]["latest_checkpoint"], name);

    // Stopping again: nothing is running, exit code 4.
    assert_eq!(env.run(&["stop"]).status.code(), Some(4));
}

#[test]
fn a_worker_ignoring_sigterm_is_killed_and_the_newest_checkpoint_is_named() {
    let mut env = Env::new(
        &[
            "--ignore-sigterm",
            "--total-steps",
            "100000",
            "--step-ms",
            "10",
            "--checkpoint-every",
            "5",
        ],
        "",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_checkpoints(1, Duration::from_secs(10));
    let pid = env.worker_pid().unwrap();
    let t = Instant::now();
    let out = env.run(&["stop", "--timeout", "0.5"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    let said = stdout(&out);
    assert!(
        said.contains("no checkpoint was written by the stop"),
        "{said}"
    );
    assert!(said.contains("killed"), "{said}");
    let newest = lavender_newest(&env.run_dir());
    assert!(
        said.contains(&newest),
        "names the newest complete checkpoint {newest}: {said}"
    );
    assert!(!alive(pid), "the worker was SIGKILLed");
}

fn lavender_newest(run_dir: &Path) -> String {
    let mut names: Vec<(std::time::SystemTime, String)> = std::fs::read_dir(run_dir)
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.path().join("trainer_state.json").is_file())
        .map(|e| {
            let m = std::fs::metadata(e.path().join("trainer_state.json"))
                .unwrap()
                .modified()
                .unwrap();
            (m, e.path().display().to_string())
        })
        .collect();
    names.sort();
    names.pop().unwrap().1
}

/// The daemon supervises `worker` as it was (re-adopted, not restarted) and it
/// trains on: ten steps past the status's.
fn trains_on_re_adopted(env: &Env, worker: i32) {
    let st = env.status();
    assert_eq!(st["pipeline"]["pid"], worker, "re-adopted, not restarted");
    assert_eq!(st["pipeline"]["state"], "running");
    assert_eq!(st["pipeline"]["restarts"], 0);
    let step = st["training"]["step"].as_u64().unwrap();
    env.wait_step(step + 10, Duration::from_secs(10));
}

/// A fake worker of `steps` (with `args`) past step 5, its daemon then SIGKILLed:
/// the worker trains on, nobody supervising it. Returns its pid.
fn left_by_a_killed_daemon(args: &[&str], steps: &str) -> (Env, i32) {
    let mut env = Env::new(args, "", steps);
    env.serve();
    env.start(&[]);
    env.wait_step(5, Duration::from_secs(10));
    let worker = env.worker_pid().unwrap();
    env.kill_daemons();
    (env, worker)
}

#[test]
fn a_sigkilled_daemon_leaves_the_worker_running_and_a_new_one_adopts_it() {
    let (mut env, worker) = left_by_a_killed_daemon(
        &["--total-steps", "150", "--step-ms", "20"],
        "[train, mine_hard]",
    );
    let run = env.run_dir();
    let at_kill = heartbeat_step(&run).expect("a heartbeat");
    wait_until(
        Duration::from_secs(10),
        "training to go on without the daemon",
        || heartbeat_step(&run) >= Some(at_kill + 3),
    );
    assert!(alive(worker), "training goes on without the daemon");

    // No daemon: status from the files, liveness from pid + start time.
    let out = env.run(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_valid(&v);
    assert_eq!(v["pipeline"]["running"], true);
    assert_eq!(v["pipeline"]["pid"], worker);

    env.serve();
    let st = env.status();
    assert_eq!(st["pipeline"]["pid"], worker, "re-adopted, not restarted");
    assert_eq!(st["pipeline"]["state"], "running");
    assert_eq!(env.train_calls().len(), 1);
    // It notices the adopted worker's exit and judges it by the final heartbeat.
    env.wait_state("finished", Duration::from_secs(20));
    let st = env.status();
    assert_eq!(st["steps"]["train"], "done");
    assert_eq!(st["steps"]["mine_hard"], "done");
    assert_eq!(st["pipeline"]["restarts"], 0);
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(log.contains("re-adopted"), "{log}");
}

#[test]
fn a_reused_pid_is_not_mistaken_for_the_worker() {
    let env = Env::new(&[], "", "[train]");
    std::fs::create_dir_all(env.state_dir()).unwrap();
    // pipeline.json names our own pid with a start time that is not ours.
    let record = serde_json::json!({
        "state": "running", "chunk": 1, "scale": "tiny",
        "steps": [{"name": "train", "state": "running"}],
        "active_step": "train", "run_dir": null, "log_file": null,
        "worker": {"pid": std::process::id(), "start_time": "1", "step": "train", "started_at": "2026-01-01T00:00:00Z"},
        "restarts": 0, "resume_from": null, "last_error": null, "updated_at": "2026-01-01T00:00:00Z"
    });
    std::fs::write(env.state_dir().join("pipeline.json"), record.to_string()).unwrap();
    let out = env.run(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_valid(&v);
    assert_eq!(v["pipeline"]["running"], false);
    assert_eq!(v["pipeline"]["pid"], serde_json::Value::Null);
    assert_eq!(v["pipeline"]["state"], "crashed");
}

/// `on_stall: alert`: a hung worker is flagged and alerted, and left as it is.
#[test]
fn with_on_stall_alert_a_hung_worker_is_flagged_and_left_alone() {
    let mut env = Env::new(
        &[
            "--hang-after",
            "3",
            "--step-ms",
            "10",
            "--total-steps",
            "1000",
        ],
        "  stale_after_s: 1\n  on_stall: alert",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    wait_until(Duration::from_secs(5), "the worker to hang", || {
        env.status()["training"]["step"].as_u64() == Some(3)
    });
    let worker = env.worker_pid().unwrap();
    wait_until(Duration::from_secs(8), "a stale heartbeat", || {
        env.status()["training"]["heartbeat_stale"] == true
    });
    env.log_with(
        "ALERT step train: heartbeat is stale",
        Duration::from_secs(5),
    );
    // The watchdog alerts instead of reporting the hang: the worker is left alone.
    let st = env.status();
    assert_eq!(st["pipeline"]["running"], true);
    assert_eq!(st["pipeline"]["pid"], worker);
    assert!(alive(worker));
    assert_eq!(env.train_calls().len(), 1);
}

/// A worker that stays alive but stops beating (and ignores SIGTERM, as a
/// deadlocked one may): killed after the grace and restarted from the run's latest
/// checkpoint; the run finishes; the alert and the status say what happened.
#[test]
fn a_hung_worker_is_killed_and_restarted_and_the_run_finishes() {
    let mut env = Env::new(
        &[
            "--hang-after",
            "7",
            "--hang-times",
            "1",
            "--ignore-sigterm",
            "--step-ms",
            "10",
            "--total-steps",
            "30",
            "--checkpoint-every",
            "5",
        ],
        "  stale_after_s: 1\n  stall_kill_grace_s: 0.5",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_step(7, Duration::from_secs(10));
    let hung = env.worker_pid().unwrap();
    let st = env.wait_state("finished", Duration::from_secs(30));
    assert!(!alive(hung), "the hung worker was killed");
    let calls = env.train_calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let resume = resume_arg(&calls[1]).expect("the restart resumes");
    let state = read_json(&Path::new(&resume).join("trainer_state.json"));
    assert_eq!(
        state["step"], 5,
        "from the run's latest checkpoint: {resume}"
    );
    let recovery = &st["pipeline"]["recovery"];
    assert_eq!(recovery["reason"], "hung", "{st:#}");
    let message = recovery["message"].as_str().unwrap();
    let name = Path::new(&resume).file_name().unwrap().to_str().unwrap();
    assert!(
        message.starts_with("hung at step 7 for ")
            && message.ends_with(&format!("; restarted from {name}")),
        "{message}"
    );
    assert_eq!(recovery["checkpoint"], name);
    assert_eq!(st["pipeline"]["restarts"], 1);
    let log = env.log_with(
        &format!("ALERT step train: {message}"),
        Duration::from_secs(10),
    );
    assert!(
        log.contains("the hung worker is still there; SIGKILL"),
        "{log}"
    );
}

/// A data step frozen mid-work (SIGSTOP: it stops writing its progress beat,
/// `<run>/step_heartbeat.json`) is hung once `data_step_stale_after_s` passes on the
/// daemon's monotonic clock: killed (a stopped process ignores SIGTERM: SIGKILL after
/// the grace) and run again; the run finishes; the recovery and the log say so.
#[test]
fn a_frozen_data_step_is_killed_and_run_again() {
    let mut env = Env::new(
        &["--data-step-ms", "2500"],
        "  data_step_stale_after_s: 1\n  stall_kill_grace_s: 0.5",
        "[downloads]",
    );
    env.serve();
    env.start(&[]);
    let mut frozen = None;
    wait_until(
        Duration::from_secs(20),
        "the step's first progress beat",
        || {
            let run_dir = env.pipeline_json()["run_dir"].as_str().map(str::to_string);
            frozen = run_dir
                .and_then(|d| std::fs::read(Path::new(&d).join("step_heartbeat.json")).ok())
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|beat| beat["pid"].as_i64());
            frozen.is_some()
        },
    );
    let frozen = frozen.unwrap() as i32;
    send_signal(frozen, nix::sys::signal::Signal::SIGSTOP as i32);
    let st = env.wait_state("finished", Duration::from_secs(60));
    assert!(!alive(frozen), "the frozen step was killed");
    let runs: Vec<_> = env
        .calls()
        .into_iter()
        .filter(|a| a.iter().any(|x| x == "downloads"))
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let recovery = &st["pipeline"]["recovery"];
    assert_eq!(recovery["reason"], "hung", "{st:#}");
    let message = recovery["message"].as_str().unwrap();
    assert!(message.starts_with("downloads hung for "), "{message}");
    let log = env.log_with(
        &format!("ALERT step downloads: {message}"),
        Duration::from_secs(10),
    );
    assert!(
        log.contains("supervisor.data_step_stale_after_s allows 1.0 s"),
        "{log}"
    );
}

/// `stale_after_s: auto`: the allowance is learned from the run's own heartbeats
/// and kept in its record, so a hang is caught after factor × the longest interval
/// seen (within the floor), long before the ceiling.
#[test]
fn an_auto_allowance_is_learned_from_the_run_and_catches_a_hang() {
    let mut env = Env::new(
        &[
            "--hang-after",
            "40",
            "--hang-times",
            "1",
            "--ignore-sigterm",
            "--step-ms",
            "20",
            "--total-steps",
            "60",
            "--checkpoint-every",
            "10",
        ],
        "  stale_after_s: auto\n  stale_auto: {factor: 5, floor_s: 1, ceiling_s: 600}\n  stall_kill_grace_s: 0.5",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_step(40, Duration::from_secs(10));
    let learned = env.pipeline_json()["heartbeat_interval_s"].as_f64();
    assert!(
        learned.is_some_and(|s| s > 0.0 && s < 1.0),
        "learned {learned:?} s between two steps of 20 ms"
    );
    // Caught after the 1 s floor: the 600 s ceiling would time this out.
    let st = env.wait_state("finished", Duration::from_secs(60));
    assert_eq!(st["pipeline"]["recovery"]["reason"], "hung", "{st:#}");
    assert_eq!(env.train_calls().len(), 2);
}

/// A save that takes longer than `stale_after_s` is a save (`saving_grace_s`), and
/// a worker silent until its first heartbeat is starting (`startup_grace_s`): not
/// hangs.
#[test]
fn a_long_save_or_a_slow_start_is_not_a_hang() {
    let mut env = Env::new(
        &[
            "--silent-start-ms",
            "2500",
            "--save-ms",
            "2500",
            "--checkpoint-every",
            "5",
            "--total-steps",
            "8",
            "--step-ms",
            "10",
        ],
        "  stale_after_s: 1\n  startup_grace_s: 30\n  saving_grace_s: 30",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    let mut saw_a_long_save = false;
    env.wait_status(Duration::from_secs(40), "the run to finish", |st| {
        assert_eq!(st["training"]["heartbeat_stale"], false, "{st:#}");
        saw_a_long_save |= st["training"]["running"] == true
            && st["training"]["heartbeat_age_s"].as_u64() >= Some(2);
        st["pipeline"]["state"] == "finished"
    });
    assert!(saw_a_long_save, "no save outlasted stale_after_s");
    assert_eq!(env.train_calls().len(), 1);
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(!log.contains("hung"), "{log}");
}

/// A config the worker rejects (an incompatible checkpoint, missing data) would
/// fail the same way again: failed at once, no restart, one alert with the cause
/// and the fix; the status names the kind.
#[test]
fn failures_that_will_repeat_fail_at_once_naming_the_cause_and_the_fix() {
    for (kind, cause) in [
        ("config", "the worker rejected its config"),
        (
            "incompatible_checkpoint",
            "the checkpoint does not fit the configured model",
        ),
        ("data", "the training data is missing or corrupt"),
    ] {
        let mut env = Env::new(&["--crash-after", "2", "--crash-kind", kind], "", "[train]");
        env.serve();
        env.start(&[]);
        let st = env.wait_state("failed", Duration::from_secs(10));
        assert_eq!(st["pipeline"]["failure"]["kind"], kind, "{st:#}");
        assert_eq!(st["pipeline"]["restarts"], 0);
        assert_eq!(env.train_calls().len(), 1, "{kind}: restarted");
        let alert = format!(
            "ALERT pipeline failed at step train: {cause}: fake {kind} failure at step 2; to fix: "
        );
        let log = env.log_with(&alert, Duration::from_secs(10));
        assert_eq!(log.matches(&alert).count(), 1, "{kind}: {log}");
        assert!(!log.contains("ALERT step train crashed"), "{log}");
    }
}

/// A failure record the daemon cannot read is a crash (restarted), and the daemon
/// logs the raw record.
#[test]
fn an_unreadable_failure_record_is_a_crash_and_is_logged() {
    let mut env = Env::new(
        &[
            "--crash-after",
            "3",
            "--crash-times",
            "1",
            "--crash-kind",
            "meteor",
            "--total-steps",
            "10",
            "--checkpoint-every",
            "5",
        ],
        "",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    let st = env.wait_state("finished", Duration::from_secs(20));
    assert_eq!(st["pipeline"]["restarts"], 1);
    assert_eq!(st["pipeline"]["failure"]["kind"], "crash");
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(
        log.contains("the worker's failure record does not parse")
            && log.contains(r#""kind":"meteor""#),
        "{log}"
    );
}

/// Restarts whose worker fails before training past the step it resumed from
/// would go on for ever: after `max_no_progress_restarts` of them, failed.
#[test]
fn restarts_that_make_no_progress_fail_saying_so() {
    let mut env = Env::new(
        &["--crash-after", "0", "--total-steps", "50"],
        "  max_restarts: 10\n  max_no_progress_restarts: 2",
        "[train]",
    );
    env.backoff_ms = "50".into();
    env.serve();
    env.start(&[]);
    env.wait_state("failed", Duration::from_secs(20));
    assert_eq!(env.train_calls().len(), 3, "the first run and two restarts");
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(
        log.contains(
            "2 restart(s) in a row did not train past step 0 (supervisor.max_no_progress_restarts)"
        ),
        "{log}"
    );
}

/// A fake run long enough to be interrupted, short enough to finish.
fn interruptible() -> Env {
    Env::new(
        &[
            "--total-steps",
            "60",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "10",
        ],
        "",
        "[train, mine_hard]",
    )
}

/// The checkpoint the last `final_saved` event of `run_dir` names.
fn final_saved(run_dir: &Path) -> String {
    events(run_dir)
        .into_iter()
        .rfind(|e| e["kind"] == "final_saved")
        .expect("a final_saved event")["path"]
        .as_str()
        .unwrap()
        .to_string()
}

/// SIGTERM to the daemon (`systemctl restart`, a shutdown): the worker saves and
/// the daemon exits 0, the pipeline interrupted; the next `serve` on the same data
/// root resumes the run from what the stop saved, by itself, and it finishes.
#[test]
fn sigterm_to_the_daemon_interrupts_the_run_and_the_next_daemon_resumes_it() {
    let mut env = interruptible();
    env.serve();
    env.start(&[]);
    env.wait_step(15, Duration::from_secs(10));
    let worker = env.worker_pid().unwrap();
    let exits = env.terminate_daemons();
    assert!(exits.iter().all(|s| s.success()), "{exits:?}");
    assert!(!alive(worker));
    let record = env.pipeline_json();
    assert_eq!(record["state"], "stopped");
    assert_eq!(record["stop_cause"], "daemon_exit");
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(log.contains("the stop saved"), "{log}");
    let saved = final_saved(&env.run_dir());

    env.serve(); // no `start`
    let st = env.wait_state("finished", Duration::from_secs(30));
    let calls = env.train_calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(resume_arg(&calls[1]).as_deref(), Some(saved.as_str()));
    assert_eq!(st["steps"]["train"], "done");
    assert_eq!(st["steps"]["mine_hard"], "done");
    assert_eq!(st["pipeline"]["restarts"], 0);
    let recovery = &st["pipeline"]["recovery"];
    assert_eq!(recovery["reason"], "daemon_exit", "{st:#}");
    let name = Path::new(&saved).file_name().unwrap().to_str().unwrap();
    assert_eq!(recovery["checkpoint"], name);
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(
        log.contains(&format!(
            "interrupted by the daemon's exit (SIGTERM/SIGINT); resumed from {name}"
        )),
        "{log}"
    );
}

/// The daemon and the worker gone without a word (a power loss; here SIGKILL to
/// both): the record still says running; the next daemon resumes the run from its
/// latest complete checkpoint.
#[test]
fn a_power_loss_is_resumed_from_the_latest_checkpoint_by_the_next_daemon() {
    let mut env = interruptible();
    env.serve();
    env.start(&[]);
    env.wait_checkpoints(2, Duration::from_secs(10));
    let worker = env.worker_pid().unwrap();
    env.kill_daemons();
    send_signal(-worker, 9);
    wait_until(Duration::from_secs(5), "the worker to be gone", || {
        !alive(worker)
    });
    assert_eq!(env.pipeline_json()["state"], "running");
    let newest = lavender_newest(&env.run_dir());

    env.serve();
    let st = env.wait_state("finished", Duration::from_secs(30));
    let calls = env.train_calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(resume_arg(&calls[1]).as_deref(), Some(newest.as_str()));
    assert_eq!(st["pipeline"]["recovery"]["reason"], "power_loss", "{st:#}");
    assert_eq!(st["pipeline"]["restarts"], 0, "not a crash restart");
    assert_eq!(st["steps"]["mine_hard"], "done");
}

/// An operator's stop is not an interruption: the next daemon leaves it stopped.
#[test]
fn an_operators_stop_stays_stopped_across_a_daemon_restart() {
    let mut env = interruptible();
    env.serve();
    env.start(&[]);
    env.wait_step(5, Duration::from_secs(10));
    env.stop_saved();
    assert_eq!(env.pipeline_json()["stop_cause"], "operator");
    env.terminate_daemons();
    env.serve();
    env.log_with(
        "the pipeline was stopped by the operator; it stays stopped",
        Duration::from_secs(5),
    );
    assert_eq!(env.status()["pipeline"]["state"], "stopped");
    assert_eq!(env.train_calls().len(), 1);
}

/// `resume_on_start: false`: an interrupted run stays stopped, and the daemon says
/// so and how to continue; `start` (which starts a daemon of its own) starts what
/// it is asked, here the run resumed from the latest checkpoint.
#[test]
fn with_resume_on_start_off_an_interrupted_run_stays_stopped_and_the_log_says_so() {
    let mut env = Env::new(
        &[
            "--total-steps",
            "60",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "10",
        ],
        "  resume_on_start: false",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_step(5, Duration::from_secs(10));
    env.terminate_daemons();
    env.serve();
    env.log_with(
        "resume on start is off (supervisor.resume_on_start), so it stays stopped: `lavenderd start --resume latest` continues it",
        Duration::from_secs(5),
    );
    assert_eq!(env.status()["pipeline"]["state"], "stopped");
    assert_eq!(env.train_calls().len(), 1);
    env.terminate_daemons();

    // No daemon: `start` starts one, which does not resume first.
    env.start(&["--resume", "latest"]);
    env.wait_state("finished", Duration::from_secs(30));
    assert_eq!(env.train_calls().len(), 2);
}

/// SIGTERM with connections open: a stop request in flight gets its answer, the
/// event stream ends, a kept-alive idle connection is closed, and the daemon exits
/// 0 (axum's graceful shutdown drains every connection of both listeners).
#[test]
fn sigterm_answers_open_requests_and_closes_connections_before_exiting() {
    let env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "10",
            "--save-ms",
            "800",
        ],
        "",
        "[train]",
    );
    let log = std::fs::File::create(env.daemon_log()).unwrap();
    let mut daemon = env
        .cmd()
        .arg("serve")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "the daemon", || {
        env.uds("GET", "/healthz", None).is_some()
    });
    env.start(&[]);
    env.wait_step(3, Duration::from_secs(10));
    let addr = env.addr();
    let mut idle = KeepAlive::tcp(&addr);
    assert_eq!(idle.send("GET", "/status", None, None).status, 200);
    let mut unix_idle = KeepAlive::uds(&env.state_dir().join("lavenderd.sock"));
    assert_eq!(unix_idle.send("GET", "/healthz", None, None).status, 200);
    let mut events = sse::SseClient::connect(&addr, None);
    let (stop_addr, token) = (addr.clone(), env.token());
    let stop = std::thread::spawn(move || {
        http::tcp(
            &stop_addr,
            "POST",
            "/pipeline/stop",
            Some("{}"),
            Some(&token),
        )
    });
    env.wait_state("stopping", Duration::from_secs(10));
    send_signal(daemon.id() as i32, 15);

    let answer = stop.join().unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.json()["saved_checkpoint"].is_string(),
        "{}",
        answer.body
    );
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(idle.closed_by_server(), "the idle TCP connection is closed");
    assert!(
        unix_idle.closed_by_server(),
        "the idle socket connection is closed"
    );
    // The stream ends (its last events, then the end), rather than hanging.
    while events.next(Duration::from_secs(10)).is_some() {}
}

fn started_at(env: &Env) -> String {
    let h = env
        .uds("GET", "/healthz", None)
        .expect("the daemon answers");
    h.json()["started_at"].as_str().unwrap().to_string()
}

/// An upgrade in the middle of a run: `lavenderd daemon restart` (and SIGUSR2, the
/// same for a service manager) restarts the daemon alone. The worker process keeps
/// training through it, the new daemon (same pid: it re-executed in place) re-adopts
/// it rather than starting another, and still supervises it: a stop saves.
#[test]
fn a_daemon_restarted_alone_re_adopts_the_worker_which_keeps_training() {
    let mut env = Env::new(
        &["--total-steps", "100000", "--step-ms", "10"],
        "",
        "[train]",
    );
    let daemon = env.serve();
    env.start(&[]);
    env.wait_step(5, Duration::from_secs(10));
    let worker = env.worker_pid().unwrap();
    let first = started_at(&env);

    let out = env.run(&["daemon", "restart"]);
    assert!(
        out.status.success(),
        "{}{}\n--- daemon log ---\n{}",
        stdout(&out),
        stderr(&out),
        std::fs::read_to_string(env.daemon_log()).unwrap_or_default()
    );
    assert!(
        stdout(&out).contains(&format!("worker pid {worker} keeps training")),
        "{}",
        stdout(&out)
    );
    let second = started_at(&env);
    assert_ne!(first, second, "a new daemon image answers");
    let health = env.tcp("GET", "/healthz", None, None).json();
    assert_eq!(health["pid"], daemon, "re-executed in place: the pid stays");
    assert!(alive(worker), "the worker kept running");
    trains_on_re_adopted(&env, worker);
    assert_eq!(env.train_calls().len(), 1, "no second worker was started");
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(log.contains("restarting the daemon alone"), "{log}");
    assert!(log.contains("re-adopted"), "{log}");

    // SIGUSR2 does the same.
    send_signal(daemon as i32, 12);
    wait_until(
        Duration::from_secs(10),
        "the daemon to restart on SIGUSR2",
        || {
            env.uds("GET", "/healthz", None)
                .is_some_and(|h| h.json()["started_at"].as_str() != Some(second.as_str()))
        },
    );
    assert_eq!(env.status()["pipeline"]["pid"], worker);
    assert!(alive(worker));

    // The re-adopted worker is still supervised: a stop saves, and it is reaped.
    let said = env.stop_saved();
    assert!(said.contains("saved"), "{said}");
    // Gone, not left a zombie: the re-executed daemon is still its parent and reaps it.
    wait_until(Duration::from_secs(5), "the worker to be reaped", || {
        !Path::new(&format!("/proc/{worker}")).exists()
    });
    assert_eq!(env.status()["pipeline"]["state"], "stopped");
}

/// An upgrade that swaps the symlink the daemon was started by (a versioned install
/// directory, Homebrew's `Cellar`): a restart alone executes what that path names
/// now, not the old version's file, and the new version re-adopts the worker.
#[test]
fn a_restart_alone_runs_what_is_installed_at_the_started_path_now() {
    let mut env = Env::new(
        &["--total-steps", "100000", "--step-ms", "10"],
        "",
        "[train]",
    );
    let install = env.dir.path().join("install");
    for dir in ["v1", "v2", "bin"] {
        std::fs::create_dir_all(install.join(dir)).unwrap();
    }
    let real = lavenderd();
    std::os::unix::fs::symlink(&real, install.join("v1/lavenderd")).unwrap();
    // "v2" says it ran (with its pid), then is the same daemon.
    let ran = env.dir.path().join("v2-ran");
    let v2 = install.join("v2/lavenderd");
    lavender_testkit::write_executable(
        &v2,
        &format!(
            "#!/bin/sh\necho $$ >> '{}'\nexec '{}' \"$@\"\n",
            ran.display(),
            real.display()
        ),
    );
    let link = install.join("bin/lavenderd");
    std::os::unix::fs::symlink("../v1/lavenderd", &link).unwrap();
    env.bin = link.clone();
    let daemon = env.serve();
    env.start(&[]);
    env.wait_step(5, Duration::from_secs(10));
    let worker = env.worker_pid().unwrap();

    // The upgrade: the symlink is replaced by one naming v2, as installers do.
    let next = install.join("bin/lavenderd.new");
    std::os::unix::fs::symlink("../v2/lavenderd", &next).unwrap();
    std::fs::rename(&next, &link).unwrap();
    env.bin = real;
    let out = env.run(&["daemon", "restart"]);
    assert!(
        out.status.success()
            && stdout(&out).contains(&format!("worker pid {worker} keeps training")),
        "{}{}\n--- daemon log ---\n{}",
        stdout(&out),
        stderr(&out),
        std::fs::read_to_string(env.daemon_log()).unwrap_or_default()
    );
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap_or_default().trim(),
        daemon.to_string(),
        "the daemon executed v2 in place (same pid)"
    );
    let st = env.status();
    assert_eq!(st["pipeline"]["pid"], worker, "re-adopted, not restarted");
    assert_eq!(st["pipeline"]["state"], "running");
    assert!(alive(worker));
    assert_eq!(env.train_calls().len(), 1, "no second worker was started");
    env.stop_saved();
}

#[test]
fn start_without_a_daemon_starts_one_in_the_background() {
    let env = Env::new(
        &["--total-steps", "100000", "--step-ms", "10"],
        "",
        "[train]",
    );
    let out = env.run(&["start", "--scale", "small"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("pipeline running"),
        "{}",
        stdout(&out)
    );
    let out = env.run(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_valid(&v);
    assert_eq!(v["pipeline"]["scale"], "small");
    assert_eq!(v["pipeline"]["running"], true);
    // The scale travels in one channel, the config file: not in the argv.
    let calls = env.train_calls();
    assert!(!calls[0].iter().any(|a| a == "--scale"), "{calls:?}");
    // The config the worker is given builds small's model, not the daemon's default
    // scale's, loaded as the worker loads it.
    let file = env.state_dir().join("pipeline-config.yaml");
    let small = lavender::config::ModelSize {
        n_layer: 6,
        n_head: 6,
        n_embd: 384,
        n_positions: 256,
    };
    let opts = lavender::config::LoadOptions {
        file: Some(file.clone()),
        ..Default::default()
    };
    let config = lavender::config::Config::load(&opts).unwrap();
    assert_eq!(config.model_size(), small, "{}", file.display());
    env.stop_saved();
}

#[test]
fn stop_also_ends_helpers_that_outlive_the_worker() {
    let mut env = Env::new(
        &[
            "--spawn-helper",
            "--total-steps",
            "100000",
            "--step-ms",
            "10",
        ],
        "",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_step(3, Duration::from_secs(10));
    let helper: i32 = std::fs::read_to_string(env.data_root.join("fake-helper.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(helper));
    let t = Instant::now();
    let out = env.run(&["stop", "--timeout", "1"]);
    assert!(t.elapsed() < Duration::from_secs(8), "the stop finished");
    // The worker saved and exited; its helper ignored SIGTERM and got SIGKILL.
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains("the stop saved"), "{}", stdout(&out));
    wait_until(Duration::from_secs(2), "the helper to be gone", || {
        !alive(helper)
    });
}

/// A Python protocol worker raising the same RuntimeError at the same late step, 17
/// steps past its last checkpoint, each attempt running longer than
/// `restart_reset_after_s` (1 s here; the restart count starts afresh every time):
/// after `max_same_failure` (3) attempts the pipeline fails, naming the step and the
/// message, instead of restarting for ever.
#[test]
fn the_same_late_failure_repeated_fails_after_max_same_failure_whatever_the_reset_timer() {
    use lavender_testkit::python::venv_tool;
    let command = vec![
        venv_tool("python"),
        repo()
            .join("python/tests/late_crash_script.py")
            .display()
            .to_string(),
    ];
    let mut env = Env::python(
        &command,
        "  max_restarts: 3\n  restart_reset_after_s: 1",
        "",
    );
    env.worker_name = "late_crash_script.py".into();
    env.serve();
    env.start(&[]);
    let st = env.wait_state("failed", Duration::from_secs(240));
    let reason = st["pipeline"]["last_error"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the same failure 3 times in a row at step 137")
            && reason.contains("token id out of range")
            && reason.contains("supervisor.max_same_failure")
            && reason.contains("to fix:"),
        "{reason}"
    );
    let starts = events(&env.run_dir())
        .into_iter()
        .filter(|e| e["kind"] == "run_started")
        .count();
    assert_eq!(starts, 3, "three attempts, then the pipeline failed");
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(
        log.contains("the count started afresh")
            && log.contains("the same failure 2 times in a row, the pipeline fails at 3"),
        "the restart alerts say where the counts stand:\n{log}"
    );
}

/// One generation, whatever the worker does: a script worker (nothing in it sets a
/// parent-death signal) starts a helper with an environment of its own (`env -i`,
/// so no generation marker) in a session of its own (`setsid`), and is SIGKILLed.
/// The helper is gone before the restarted worker starts (it looks, first thing).
/// The daemon is started as users start it (`lavenderd start`).
#[test]
fn a_helper_with_its_own_environment_and_session_dies_with_its_worker() {
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let script = dir.path().join("helper-worker.sh");
    let m = marks.display();
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
n=$(( $(cat {m}/attempts 2>/dev/null || echo 0) + 1 ))
echo $n > {m}/attempts
if [ "$n" = 1 ]; then
  env -i PATH=/usr/bin:/bin setsid sleep 6007 </dev/null >/dev/null 2>&1 &
  echo $! > {m}/helper.pid
else
  pid=$(cat {m}/helper.pid)
  if tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -q 'sleep 6007'; then
    echo alive > {m}/helper-at-restart.tmp
  else
    echo gone > {m}/helper-at-restart.tmp
  fi
  mv {m}/helper-at-restart.tmp {m}/helper-at-restart
fi
echo $$ > {m}/worker.pid
exec sleep 600
"#
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let yaml = format!(
        "steps: [train]\nworker:\n  command: [{}]\nsupervisor:\n  listen: 127.0.0.1:0\n  poll_interval_ms: 50\n  max_restarts: 3\n",
        script.display()
    );
    let env = Lavenderd::in_dir(dir.path(), &yaml, "helper-worker.sh");
    // Once it runs `sleep` (before, it is `env` or `setsid` on the way there).
    let is_helper = |pid: i32| cmdline(pid) == ["sleep", "6007"];
    let read = |name: &str| std::fs::read_to_string(marks.join(name)).unwrap_or_default();
    // The worker execs `sleep 600`, which the test kit does not know for a worker:
    // whatever happens, the worker and the helper end with the test.
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for (name, argv) in [("worker.pid", "600"), ("helper.pid", "6007")] {
                if let Some(pid) = std::fs::read_to_string(self.0.join(name))
                    .ok()
                    .and_then(|p| p.trim().parse::<i32>().ok())
                    .filter(|pid| cmdline(*pid) == ["sleep", argv])
                {
                    send_signal(pid, 9);
                }
            }
        }
    }
    let _cleanup = Cleanup(marks.clone());
    env.start(&[]);
    let helper: i32 = {
        wait_until(Duration::from_secs(30), "the helper to run", || {
            read("helper.pid")
                .trim()
                .parse::<i32>()
                .is_ok_and(is_helper)
        });
        read("helper.pid").trim().parse().unwrap()
    };
    // Its own session, and no marker in its environment.
    let stat = std::fs::read_to_string(format!("/proc/{helper}/stat")).unwrap();
    let session: i32 = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .nth(3)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(session, helper, "the helper leads its own session");
    let environ = std::fs::read(format!("/proc/{helper}/environ")).unwrap();
    assert!(
        !String::from_utf8_lossy(&environ).contains("LAVENDER"),
        "the helper's environment is its own"
    );
    wait_until(Duration::from_secs(30), "the worker to run", || {
        read("worker.pid")
            .trim()
            .parse::<i32>()
            .is_ok_and(|pid| cmdline(pid) == ["sleep", "600"])
    });
    let worker: i32 = read("worker.pid").trim().parse().unwrap();
    send_signal(worker, 9);
    wait_until(Duration::from_secs(60), "the restarted worker", || {
        !read("helper-at-restart").is_empty()
    });
    let seen = read("helper-at-restart");
    assert_eq!(seen.trim(), "gone", "the helper outlived its worker");
    assert_eq!(read("attempts").trim(), "2");
    // The daemon `lavenderd start` left in the background logs into the state folder.
    let log_file = env.state_dir().join("lavenderd.log");
    let said = format!("{helper} (sleep)");
    wait_until(
        Duration::from_secs(30),
        "the daemon to say what it killed",
        || std::fs::read_to_string(&log_file).is_ok_and(|l| l.contains(&said)),
    );
    let log = std::fs::read_to_string(&log_file).unwrap();
    let line = log.lines().find(|l| l.contains(&said)).unwrap();
    eprintln!("{line}");
    assert!(line.contains("the worker left behind"), "{line}");
}

/// The record an older daemon wrote is one an upgraded daemon re-adopts from: the
/// `state/pipeline.json` the daemon wrote before the actor took one input (commit
/// aff3e6d: daemon/tests/fixtures/pipeline-aff3e6d.json), its machine-specific values
/// (the worker's pid and start time, the paths, the config's digest) filled in from a
/// live worker, replaces the file under a killed daemon; the next daemon
/// re-adopts that worker, supervises it (a stop saves) and starts no second one.
#[test]
fn a_record_written_by_an_older_daemon_still_re_adopts_the_running_worker() {
    let (mut env, worker) =
        left_by_a_killed_daemon(&["--total-steps", "100000", "--step-ms", "10"], "[train]");
    let path = env.state_dir().join("pipeline.json");
    let live: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let fixture = std::fs::read_to_string(
        lavender_testkit::repo().join("daemon/tests/fixtures/pipeline-aff3e6d.json"),
    )
    .unwrap();
    let text = |v: &serde_json::Value| v.as_str().unwrap().to_string();
    let (w, req) = (&live["worker"], &live["request"]);
    let old = [
        ("@DATA_ROOT@", text(&req["data_root"])),
        ("@CONFIG_PATH@", text(&req["config"]["path"])),
        ("@CONFIG_SHA256@", text(&req["config"]["sha256"])),
        ("@RUN_DIR@", text(&live["run_dir"])),
        ("@LOG_FILE@", text(&live["log_file"])),
        ("@PID@", w["pid"].to_string()),
        ("@START_TIME@", text(&w["start_time"])),
        ("@GENERATION@", text(&w["generation"])),
    ]
    .iter()
    .fold(fixture, |f, (k, v)| f.replace(k, v));
    assert!(!old.contains('@'), "a placeholder left: {old}");
    std::fs::write(&path, old).unwrap();

    env.serve();
    trains_on_re_adopted(&env, worker);
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(log.contains("re-adopted"), "{log}");
    let said = env.stop_saved();
    assert!(said.contains("saved"), "{said}");
    assert_eq!(env.train_calls().len(), 1, "no second worker was started");
    wait_until(Duration::from_secs(10), "the worker to end", || {
        !alive(worker)
    });
}
