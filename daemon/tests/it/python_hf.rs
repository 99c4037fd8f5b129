//! A real `transformers.Trainer` script with `lavender_protocol.hf.LavenderCallback`
//! under the real `lavenderd`, its config examples/hf-trainer/lavender.yaml as the
//! docs show it (only the port, the poll and the restarts through the environment): start →
//! running with steps → stop saves and names the checkpoint → `start --resume latest`
//! continues from it → SIGKILL the worker → restart from the run's newest checkpoint →
//! finished; every status schema-valid (the harness checks each read); the daemon's
//! retention leaves at most keep + best complete checkpoints.

use std::time::Duration;

use lavender_testkit::python::*;
use lavender_testkit::*;

/// examples/hf-trainer/lavender.yaml as written: 300 steps, a save every 50, keep 2.
const MAX_STEPS: u64 = 300;
const KEEP: usize = 2;
const SLOW: Duration = Duration::from_secs(300);

fn hf_env() -> Env {
    require_modules(&["torch", "transformers", "accelerate"]);
    Env::example("examples/hf-trainer/lavender.yaml", "train.py")
}

#[test]
fn hf_trainer_stop_resume_kill_restart_finish_with_daemon_retention() {
    let mut env = hf_env();
    env.serve();

    // 1. start → running with steps; 2. stop → the Trainer saves on SIGTERM;
    // lavenderd names the checkpoint.
    let (first_run, saved, stop_ckpt) = started_then_stopped_saved(&env, "hf", MAX_STEPS, SLOW);
    let stop_step = step_of(&saved);
    assert_eq!(stop_ckpt, format!("checkpoint-{stop_step}"));

    // 3. start --resume latest → continues from that checkpoint.
    env.start(&["--resume", "latest"]);
    let run = env.run_dir();
    assert_ne!(run, first_run, "one run directory per start");
    let loaded = wait_event(&env, &run, SLOW, "checkpoint_loaded", |e| {
        e["kind"] == "checkpoint_loaded"
    });
    assert_eq!(step_of(&loaded), stop_step);
    assert!(loaded["path"].as_str().unwrap().ends_with(&stop_ckpt));
    let after = wait_event(&env, &run, SLOW, "a save after the resume", |e| {
        e["kind"] == "checkpoint_saved" && step_of(e) > stop_step
    });
    let st = env.status();
    assert!(st["training"]["step"].as_u64().unwrap() >= stop_step);
    say(format!(
        "hf: resumed from {stop_ckpt} (step {stop_step}); saved {} at step {}",
        after["path"].as_str().unwrap().rsplit('/').next().unwrap(),
        step_of(&after)
    ));

    // 4. SIGKILL the worker → restart from the run's newest checkpoint.
    let pid = env.worker_pid().expect("a worker");
    let newest_before_kill = complete(&run).last().unwrap().clone();
    send_signal(pid, 9);
    say(format!(
        "hf: SIGKILL worker {pid}; newest complete checkpoint {} (step {})",
        newest_before_kill.0, newest_before_kill.1
    ));
    let (restarted, resumed_step) = restarted_in(&env, &run, pid, SLOW);
    assert!(resumed_step >= newest_before_kill.1);
    assert_eq!(env.pipeline_json()["restarts"], 1);
    say(format!(
        "hf: restarted as {restarted}, resumed from step {resumed_step}"
    ));

    // 5. → finished.
    assert_finished_with_final_save(&env, &run, MAX_STEPS, SLOW);
    say(format!("hf: finished at step {MAX_STEPS}"));

    // 6. The daemon's retention: at most keep + best complete checkpoints, logged in
    // the daemon's log; nothing of it written into the run (its logs are the worker's).
    let (left_after, retain_lines) = assert_retention_by_daemon(&env, &run, KEEP, MAX_STEPS);
    say(format!(
        "hf: retention kept {} complete checkpoint(s) {:?} (keep {KEEP} + best); daemon log: {}",
        left_after.len(),
        left_after,
        retain_lines.join(" | ")
    ));
}

#[test]
fn a_python_worker_that_never_heartbeats_is_flagged_stale_after_the_grace() {
    let command = vec![
        venv_tool("python"),
        "-c".into(),
        "import time; from lavender_protocol import Worker; Worker.from_argv(); time.sleep(600)"
            .into(),
    ];
    let mut env = Env::python(
        &command,
        "  stale_after_s: 1\n  startup_grace_s: 3\n  on_stall: alert",
        "",
    );
    env.serve();
    let started = std::time::Instant::now();
    env.start(&[]);
    wait_until(Duration::from_secs(30), "a stale heartbeat", || {
        env.status()["training"]["heartbeat_stale"] == true
    });
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "never before the grace ends"
    );
    assert!(!env.run_dir().join("heartbeat.json").exists());
    assert_eq!(env.status()["pipeline"]["running"], true);
    env.log_with(
        "ALERT step train: no heartbeat yet after the start-up grace",
        Duration::from_secs(10),
    );
}

/// The Hugging Face example replicating to a real S3 server (SeaweedFS): stopped,
/// its checkpoints lost; `start --resume latest` pulls the newest remote
/// `checkpoint-<N>` (the run folder as the Trainer writes it: pickles, RNG state,
/// scheduler), resumes from it, and finishes with the final weights of the same run
/// left alone, byte for byte.
#[test]
fn hf_trainer_checkpoints_lost_come_back_from_s3_and_finish_as_left_alone() {
    let s3 = lavender_testkit::s3::S3::start();
    let mut env = hf_env();
    env.env.extend(
        [
            ("LAVENDER__REPLICATE__URL", format!("s3://{}/hf", s3.bucket)),
            ("LAVENDER__REPLICATE__ENDPOINT", s3.endpoint.clone()),
            ("LAVENDER__REPLICATE__PATH_STYLE", "true".into()),
            (
                "LAVENDER__REPLICATE__CREDENTIALS_FILE",
                s3.credentials.display().to_string(),
            ),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    env.serve();
    env.start(&[]);
    env.wait_step(60, SLOW);
    env.stop_saved();
    env.wait_state("stopped", SLOW);
    let run = env.run_dir();
    let (newest, step) = complete(&run).last().unwrap().clone();
    env.wait_status(SLOW, "the stop's checkpoint safely remote", |st| {
        st["replication"]["newest_remote"]["checkpoint"].as_str() == Some(newest.as_str())
    });
    std::fs::remove_dir_all(env.data_root.join("checkpoints")).unwrap();

    let out = env.start(&["--resume", "latest"]);
    let said = stdout(&out);
    say(format!("hf: $ lavenderd start --resume latest\n{said}"));
    let run_name = run.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        said.contains(&format!(
            "pulled s3://{}/hf/{run_name}/{newest} (step {step},",
            s3.bucket
        )),
        "{said}"
    );
    env.wait_state("finished", SLOW);
    let weights = |run: &std::path::Path| {
        std::fs::read(run.join(format!("checkpoint-{MAX_STEPS}/model.safetensors"))).unwrap()
    };
    let resumed = weights(&env.run_dir());

    let mut alone = hf_env();
    alone.serve();
    alone.start(&[]);
    alone.wait_state("finished", SLOW);
    assert!(
        resumed == weights(&alone.run_dir()),
        "the HF run restored from S3 ends with other weights than the run left alone"
    );
}
