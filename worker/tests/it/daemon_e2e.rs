//! The real `lavenderd` supervising the real `lavender-worker`, end to end, at
//! tiny scale on a small generated corpus: start → status running → stop saves a
//! checkpoint (the stop's answer names it) → start --resume latest continues from
//! that step → finished. Every status read is checked against the schema. Then
//! the daemon acting on its own: SIGTERM to the daemon, SIGKILL of daemon and
//! worker, and a worker frozen with SIGSTOP each end in a finished run, with no
//! `start` typed, whose final weights are byte for byte those of a run nobody
//! touched.
//!
//! The daemon is the `lavenderd` binary beside this package's worker binary:
//! `cargo test --workspace` builds both before any test runs; for this package
//! alone build it first with `cargo build -p lavenderd`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lavender::pipeline_step::{PipelineStep, names_through};
use lavender_testkit::{Lavenderd, WORDS, wait_until, write_speeches};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(60);

/// The smallest pipeline that still runs every step: a one-layer model, short
/// stages, a heartbeat every step and a save every few.
fn config(corpus: &Path) -> String {
    format!(
        r#"steps: [{steps}]
device: cpu
threads: 1
worker:
  command: ["{worker}"]
data:
  sources:
    - path: "{corpus}"
  shards: {{shard_bytes: 2000, validation_fraction: 0.1}}
  tokenizer: {{vocab_size: 320, min_frequency: 2}}
  hard_examples: {{top_k: 8, upsample: 1}}
model: {{n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, dropout: 0.0, layer_norm_epsilon: 1.0e-5}}
optimizer: {{warmup_steps: 2}}
training:
  batch_size: 4
  seq_len: 16
  log_every: 1
  eval_every: 50
  eval_batches: 1
  keep_checkpoints: 2
  stages:
    - {{name: pretrain, steps: {pretrain}, lr: 3.0e-3, checkpoint_every: 1000}}
    - {{name: sft, steps: 4, lr: 1.0e-3, checkpoint_every: 1000}}
    - {{name: dpo, steps: 4, lr: 5.0e-4, checkpoint_every: 1000, beta: 0.1}}
supervisor:
  listen: 127.0.0.1:0
  poll_interval_ms: 50
  stop_timeout_s: 60
notify:
  desktop: false
"#,
        steps = PipelineStep::names(),
        worker = WORKER,
        corpus = corpus.display(),
        pretrain = PRETRAIN_STEPS,
    )
}

/// Enough pretrain steps that a stop lands in the middle of them.
const PRETRAIN_STEPS: u64 = 400;

fn step_states(status: &Value) -> Vec<(String, String)> {
    status["steps"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect()
}

#[test]
fn start_stop_resume_finish_with_the_real_worker() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_speeches(&dir.path().join("corpus"), &WORDS);
    let mut d = Lavenderd::with_real_worker(dir.path(), &config(&corpus));
    let log = d.daemon_log();
    let show_log = move || std::fs::read_to_string(&log).unwrap_or_default();
    let started = Instant::now();
    d.serve();

    // Start: the data steps run, then training; the status says running.
    d.start(&["--scale", "tiny"]);
    let st = d.status();
    assert_eq!(st["pipeline"]["state"], "running", "{st:#}");
    assert_eq!(st["pipeline"]["scale"], "tiny");
    let mut running = Value::Null;
    wait_until(T, "training to make progress", || {
        running = d.status();
        assert_ne!(
            running["pipeline"]["state"],
            "failed",
            "{running:#}\n{}",
            show_log()
        );
        running["active_step"] == "train" && running["training"]["step"].as_u64() >= Some(3)
    });
    assert_eq!(running["pipeline"]["running"], true, "{running:#}");
    assert!(running["pipeline"]["pid"].as_u64().is_some(), "{running:#}");
    assert_eq!(running["training"]["stage"], "pretrain", "{running:#}");
    assert_eq!(running["training"]["heartbeat_stale"], false);
    for step in names_through(PipelineStep::Precompute) {
        assert_eq!(running["steps"][step], "done", "{step}: {running:#}");
    }
    assert_eq!(running["steps"]["train"], "running");
    let first_run = d.run_dir();

    // Stop: the worker saves on SIGTERM; the answer names that checkpoint.
    let answer = d
        .uds("POST", "/pipeline/stop", Some("{}"))
        .expect("the socket answers");
    assert_eq!(answer.status, 200, "{}", answer.body);
    let report = answer.json();
    assert_eq!(report["was_running"], true, "{report:#}");
    assert_eq!(report["killed"], false, "{report:#}");
    let saved = PathBuf::from(
        report["saved_checkpoint"]
            .as_str()
            .unwrap_or_else(|| panic!("the stop saved nothing: {report:#}\n{}", show_log())),
    );
    assert!(saved.starts_with(&first_run), "{}", saved.display());
    assert!(
        report["message"]
            .as_str()
            .unwrap()
            .contains(&format!("the stop saved {}", saved.display())),
        "{report:#}"
    );
    let state: Value = serde_json::from_slice(
        &std::fs::read(saved.join("trainer_state.json")).expect("a complete checkpoint"),
    )
    .unwrap();
    let saved_step = state["step"].as_u64().unwrap();
    assert!(
        (3..PRETRAIN_STEPS).contains(&saved_step),
        "stopped mid-pretrain, at step {saved_step}"
    );
    let st = d.status();
    assert_eq!(st["pipeline"]["state"], "stopped", "{st:#}");
    assert_eq!(st["pipeline"]["running"], false);
    let saved_name = saved.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(st["training"]["latest_checkpoint"], saved_name, "{st:#}");

    // Resume: training continues from the saved step, never below it.
    d.start(&["--scale", "tiny", "--resume", "latest"]);
    let mut lowest = u64::MAX;
    let mut finished = Value::Null;
    wait_until(T, "the resumed pipeline to finish", || {
        finished = d.status();
        assert_ne!(
            finished["pipeline"]["state"],
            "failed",
            "{finished:#}\n{}",
            show_log()
        );
        // Heartbeats that report a trained step (the starting one carries no loss yet).
        if finished["active_step"] == "train"
            && finished["training"]["running"] == true
            && !finished["training"]["loss"].is_null()
            && let Some(step) = finished["training"]["step"].as_u64()
        {
            lowest = lowest.min(step);
        }
        finished["pipeline"]["state"] == "finished"
    });
    assert!(
        lowest == u64::MAX || lowest >= saved_step,
        "the resumed run went back to step {lowest} (saved at {saved_step})"
    );
    let resumed_run = d.run_dir();
    let events = std::fs::read_to_string(resumed_run.join("events.jsonl")).unwrap();
    let loaded: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "checkpoint_loaded")
        .collect();
    assert!(
        loaded
            .first()
            .and_then(|e| e["path"].as_str())
            .is_some_and(|p| p.ends_with(&saved_name)),
        "the resumed run did not load {saved_name}: {events}"
    );
    assert_eq!(loaded[0]["step"].as_u64(), Some(saved_step), "{events}");
    // The resumed run's history carries the stopped run's steps on: each step
    // trained once, none repeated from 0.
    let history = std::fs::read_to_string(resumed_run.join("log_history.jsonl")).unwrap();
    let trained: Vec<u64> = history
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e.get("loss").is_some())
        .filter_map(|e| e["step"].as_u64())
        .collect();
    let total = finished["training"]["total_steps"].as_u64().unwrap();
    assert_eq!(trained, (1..=total).collect::<Vec<u64>>(), "{history}");

    // Finished: every step done, the final checkpoint the newest, the worker gone.
    assert_eq!(finished["pipeline"]["running"], false, "{finished:#}");
    assert_eq!(finished["active_step"], Value::Null);
    for (step, state) in step_states(&finished) {
        assert_eq!(state, "done", "{step}: {finished:#}");
    }
    assert_eq!(finished["training"]["step"].as_u64(), Some(total));
    assert!(total > saved_step);
    let latest = finished["training"]["latest_checkpoint"].as_str().unwrap();
    assert!(latest.starts_with("final-"), "{finished:#}");
    eprintln!(
        "start -> stop at step {saved_step} -> resume -> finished at step {total}: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// The babysitter acting on the real worker: a service restart, a power loss and
// a frozen worker each end in a finished run whose final weights are those of a
// run nobody touched.

/// The train step alone, on the synthetic tokens of `lavender_testkit::training`:
/// a one-layer model, a heartbeat every step, a checkpoint every 20 steps.
fn train_only(supervisor: &str) -> String {
    let stages = format!(
        "    - {{name: pretrain, steps: {TRAIN_STEPS}, lr: 3.0e-3, checkpoint_every: 20}}
    - {{name: sft, steps: 4, lr: 1.0e-3, checkpoint_every: 20}}
    - {{name: dpo, steps: 4, lr: 5.0e-4, checkpoint_every: 20, beta: 0.1}}"
    );
    lavender_testkit::training::TrainOnly {
        worker: WORKER,
        model: lavender_testkit::training::SMALL_MODEL,
        keep_checkpoints: 3,
        stages: &stages,
        supervisor,
        notify: "",
        extra: "",
    }
    .yaml()
}

/// Enough steps that an interruption lands in the middle of pretraining.
const TRAIN_STEPS: u64 = 400;

/// A data root with the synthetic tokens and the daemon set up on it.
fn train_env(dir: &Path, supervisor: &str) -> Lavenderd {
    lavender_testkit::training::write_tokens(&dir.join("data"));
    Lavenderd::with_real_worker(dir, &train_only(supervisor))
}

/// The final checkpoint's weights of the pipeline's run.
fn final_weights(d: &Lavenderd) -> Vec<u8> {
    let run = d.run_dir();
    let last = lavender_testkit::training::checkpoints(&run)
        .pop()
        .expect("a checkpoint");
    assert!(
        last.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("final-"),
        "the newest checkpoint of {} is not the final one",
        run.display()
    );
    std::fs::read(last.join("model.safetensors")).unwrap()
}

/// The weights of the same run, started once and never touched.
fn untouched_weights() -> &'static [u8] {
    static WEIGHTS: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    WEIGHTS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let mut d = train_env(dir.path(), "");
        d.serve();
        d.start(&[]);
        d.wait_state("finished", T);
        final_weights(&d)
    })
}

/// Waits until the run trains past `step` (and has a checkpoint), failing on `failed`.
fn wait_training(d: &Lavenderd, step: u64) {
    d.wait_status(T, &format!("training past step {step}"), |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["training"]["step"].as_u64().unwrap_or(0) > step
            && st["training"]["checkpoints"].as_u64().unwrap_or(0) >= 1
    });
}

/// SIGTERM to the daemon mid-training (a service restart): the worker saves, the
/// daemon exits; a new `serve` on the same data root, with no `start`, resumes and
/// finishes, with the weights of the untouched run, byte for byte.
#[test]
fn sigterm_to_the_daemon_then_a_new_daemon_finishes_the_run_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = train_env(dir.path(), "");
    d.serve();
    d.start(&[]);
    wait_training(&d, 30);
    let worker = d.worker_pid().unwrap();
    let exits = d.terminate_daemons();
    assert!(exits.iter().all(|s| s.success()), "{exits:?}");
    assert!(!lavender_testkit::alive(worker));
    assert_eq!(d.pipeline_json()["stop_cause"], "daemon_exit");

    d.serve();
    let st = d.wait_state("finished", T);
    assert_eq!(
        st["pipeline"]["recovery"]["reason"], "daemon_exit",
        "{st:#}"
    );
    assert!(
        final_weights(&d) == untouched_weights(),
        "the resumed run's final weights differ from the untouched run's"
    );
    d.assert_no_resume_mismatch();
}

/// The daemon and the worker killed together (a power loss): the next daemon
/// resumes from the run's latest complete checkpoint; the same final weights.
#[test]
fn sigkill_of_daemon_and_worker_then_a_new_daemon_finishes_the_run_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = train_env(dir.path(), "");
    d.serve();
    d.start(&[]);
    wait_training(&d, 30);
    let worker = d.worker_pid().unwrap();
    d.kill_daemons();
    lavender_testkit::send_signal(-worker, 9);
    wait_until(T, "the worker to be gone", || {
        !lavender_testkit::alive(worker)
    });

    d.serve();
    let st = d.wait_state("finished", T);
    assert_eq!(st["pipeline"]["recovery"]["reason"], "power_loss", "{st:#}");
    assert!(
        final_weights(&d) == untouched_weights(),
        "the resumed run's final weights differ from the untouched run's"
    );
    d.assert_no_resume_mismatch();
}

/// The worker's whole process group frozen with SIGSTOP: no heartbeat within
/// `stale_after_s`, so it is killed (SIGTERM stays pending in a stopped process;
/// SIGKILL after the grace) and restarted from the latest checkpoint; the run
/// finishes with the untouched run's weights.
#[test]
fn a_worker_frozen_with_sigstop_is_killed_and_restarted_and_the_run_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = train_env(
        dir.path(),
        "  stale_after_s: 2\n  saving_grace_s: 20\n  evaluating_grace_s: 20\n  stall_kill_grace_s: 1",
    );
    let log = d.daemon_log();
    d.serve();
    d.start(&[]);
    wait_training(&d, 30);
    let frozen = d.worker_pid().unwrap();
    lavender_testkit::send_signal(-frozen, 19); // SIGSTOP to the group
    let st = d.wait_status(T, "the frozen worker's restart", |st| {
        st["pipeline"]["recovery"]["reason"] == "hung"
    });
    assert!(
        !lavender_testkit::alive(frozen),
        "the frozen worker was killed"
    );
    let message = st["pipeline"]["recovery"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.starts_with("hung at step "), "{message}");
    let st = d.wait_state("finished", T);
    assert_eq!(st["pipeline"]["restarts"], 1, "{st:#}");
    d.assert_no_resume_mismatch();
    let daemon_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        daemon_log.contains(&format!("ALERT step train: {message}")),
        "{daemon_log}"
    );
    eprintln!("{message}");
    assert!(
        final_weights(&d) == untouched_weights(),
        "the restarted run's final weights differ from the untouched run's"
    );
}

/// A worker hung in a known place (the `--hang-at-step` test hook loops in
/// `hung_in_test_hook` on the training thread): before it is killed, its bundle
/// holds a native stack (eu-stack) naming that function.
#[test]
fn a_hung_worker_leaves_a_native_stack_naming_where_it_hung() {
    let dir = tempfile::tempdir().unwrap();
    lavender_testkit::training::write_tokens(&dir.path().join("data"));
    // The hook's flag goes after the arguments the daemon passes (`train --config …`).
    let config = lavender_testkit::training::shell_worker(
        &train_only("  stale_after_s: 2\n  stall_kill_grace_s: 1\n  max_restarts: 0"),
        WORKER,
        &format!("exec {WORKER} \"$@\" --hang-at-step 25"),
    );
    let mut d = Lavenderd::with_real_worker(dir.path(), &config);
    d.serve();
    d.start(&[]);
    wait_training(&d, 20);
    let pid = d.worker_pid().unwrap();
    d.wait_state("failed", T);
    let incidents = d.run_dir().join("incidents");
    let bundle = std::fs::read_dir(&incidents)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("-hang"))
        .expect("a hang bundle");
    let stack = std::fs::read_to_string(bundle.join(format!("pid-{pid}/native-stack.txt")))
        .unwrap_or_else(|e| {
            panic!(
                "{e}: {}",
                std::fs::read_to_string(bundle.join("summary.txt")).unwrap_or_default()
            )
        });
    assert!(stack.contains("hung_in_test_hook"), "{stack}");
    let index: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("bundle.json")).unwrap()).unwrap();
    assert!(
        index["processes"][0]["stack_tool"]
            .as_str()
            .unwrap()
            .contains("eu-stack -p"),
        "{index:#}"
    );
    assert_eq!(index["processes"][0]["stack"]["result"], "ok", "{index:#}");
    eprintln!("native hang evidence: capture took {} s", index["took_s"]);
}

/// A training stopped and resumed twice is three sessions, each in a run directory
/// of its own that names the one it resumed from: `lavenderd runs` shows the chain
/// of three, the status names it, pruning down to one run keeps the chain, and
/// `export --all` exports the checkpoints of all three runs.
#[test]
fn a_run_stopped_and_resumed_twice_keeps_its_lineage() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = train_env(dir.path(), "");
    d.serve();
    d.start(&[]);
    let mut runs = Vec::new();
    for session in 0..2 {
        let floor = d.status()["training"]["step"].as_u64().unwrap_or(0);
        wait_training(&d, floor + 10);
        runs.push(d.run_dir());
        d.stop_saved();
        d.start(&["--resume", "latest"]);
        let st = d.status();
        assert_eq!(
            st["pipeline"]["state"], "running",
            "session {session}: {st:#}"
        );
    }
    let st = d.wait_state("finished", T);
    runs.push(d.run_dir());
    let names: Vec<String> = runs
        .iter()
        .map(|r| r.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3,
        "each session has a run of its own: {names:?}"
    );
    assert_eq!(
        st["pipeline"]["lineage"],
        serde_json::json!(names),
        "{st:#}"
    );

    // Each resumed run names its parent run and the checkpoint it resumed from.
    for i in 1..3 {
        let lineage: Value =
            serde_json::from_slice(&std::fs::read(runs[i].join("lineage.json")).unwrap()).unwrap();
        assert_eq!(lineage["parent_run"], names[i - 1], "{lineage:#}");
        let checkpoint = lineage["parent_checkpoint"].as_str().unwrap();
        assert!(
            runs[i - 1]
                .join(checkpoint)
                .join("trainer_state.json")
                .is_file(),
            "{lineage:#}"
        );
    }
    let listed = d.run(&["runs"]);
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    eprintln!("{text}");
    assert!(
        text.contains(&format!("chain: {}", names.join(" → "))),
        "{text}"
    );
    let json: Value = serde_json::from_slice(&d.run(&["runs", "--json"]).stdout).unwrap();
    assert_eq!(json[0]["name"], names[2], "{json:#}");
    assert_eq!(json[0]["chain"], serde_json::json!(names), "{json:#}");
    assert!(
        json[0]["resumed_from"]
            .as_str()
            .is_some_and(|f| f.starts_with(&format!("{}/", names[1]))),
        "{json:#}"
    );

    // Pruning to one run keeps the runs it resumed from.
    let pruned = d.run(&["prune", "--keep-runs", "1", "--yes"]);
    assert!(pruned.status.success(), "{pruned:?}");
    for r in &runs {
        assert!(r.is_dir(), "{} was pruned: {pruned:?}", r.display());
    }

    // export --all covers the whole training: checkpoints of each of the three runs.
    let out = d.run(&["export", "--all", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sources: Vec<&str> = report["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] != "skipped")
        .map(|c| c["source"].as_str().unwrap())
        .collect();
    for r in &runs {
        assert!(
            sources.iter().any(|s| Path::new(s).starts_with(r)),
            "no checkpoint of {} exported: {report:#}",
            r.display()
        );
    }
    assert!(
        Path::new(report["out"].as_str().unwrap()).starts_with(&runs[2]),
        "{report:#}"
    );
}

// ---------------------------------------------------------------------------
// Divergence rolled back: a spike at a known step, a learning rate that always
// diverges, and exact resume after a rollback.

/// A pipeline of the train step alone over `write_tokens`' data, which the test
/// writes first: a model that learns the data's cycle within 60 steps, a save every
/// 10 steps, the divergence rule over 20 steps with a patience of 2 (the testkit's
/// `spiking_run_args`), and `lr` for pretraining.
fn rollback_config(lr: &str) -> String {
    format!(
        r#"steps: [train]
device: cpu
threads: 1
seed: 1337
worker:
  command: ["{WORKER}"]
model: {{n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, dropout: 0.0, layer_norm_epsilon: 1.0e-5}}
optimizer: {{warmup_steps: 2}}
training:
  batch_size: 4
  seq_len: 16
  log_every: 1
  eval_every: 50
  eval_batches: 1
  keep_checkpoints: 3
  spike: {{factor: 3.0, window: 20, patience: 2}}
  stages:
    - {{name: pretrain, steps: 80, lr: {lr}, checkpoint_every: 10}}
    - {{name: sft, steps: 40, lr: 1.0e-3, checkpoint_every: 1000}}
    - {{name: dpo, steps: 2, lr: 5.0e-4, checkpoint_every: 1000, beta: 0.1}}
supervisor:
  listen: 127.0.0.1:0
  poll_interval_ms: 50
  stop_timeout_s: 60
notify:
  desktop: false
"#
    )
}

/// Serves `config` over `write_tokens`' data with a corrupted passage at pretraining
/// steps 61 and 62, starts, and returns the daemon.
fn spiking_daemon(dir: &Path, config: &str) -> Lavenderd {
    let mut d = Lavenderd::with_real_worker(dir, config);
    lavender_testkit::training::write_tokens(&d.data_root);
    lavender_testkit::training::poison_pretraining_steps(&d.data_root, 1337, 16, 4, 61..=62);
    d.serve();
    d.start(&[]);
    d
}

/// A loss spike at a known step (a corrupted passage drawn at steps 61 and 62): the
/// worker stops with `diverged` since step 61, the daemon rolls the run back to
/// the checkpoint of step 60, records the range (60, 62] in the run's
/// skipped.json, restarts the worker, which skips those batches, and the run
/// finishes. The status and the push say so.
#[test]
fn a_spike_is_rolled_back_to_the_checkpoint_before_it_and_the_run_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let d = spiking_daemon(dir.path(), &rollback_config("1.0e-2"));
    let log = d.daemon_log();
    let show_log = move || std::fs::read_to_string(&log).unwrap_or_default();
    let mut st = Value::Null;
    wait_until(Duration::from_secs(180), "the run to finish", || {
        st = d.status();
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}\n{}", show_log());
        st["pipeline"]["state"] == "finished"
    });
    let run = d.run_dir();
    let skips = lavender::skips::read(&run).unwrap();
    assert_eq!(skips.ranges.len(), 1, "{skips:?}");
    let range = &skips.ranges[0];
    assert_eq!((range.from_step, range.to_step), (60, 62), "{range:?}");
    assert!(range.reason.contains("since step 61"), "{range:?}");
    // The worker failed once with `diverged`, then loaded the checkpoint of step 60
    // (retention has dropped it since), skipped the data and went on.
    let events: Vec<Value> = std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    let failed = kinds
        .iter()
        .position(|k| *k == "failed")
        .expect("a failed event");
    assert_eq!(events[failed]["failure"]["kind"], "diverged");
    let loaded = &events[kinds
        .iter()
        .rposition(|k| *k == "checkpoint_loaded")
        .unwrap()];
    assert!(
        loaded["path"]
            .as_str()
            .unwrap()
            .ends_with(&range.checkpoint),
        "{loaded}"
    );
    assert_eq!(loaded["step"], 60, "{loaded}");
    let skipped = kinds
        .iter()
        .position(|k| *k == "data_skipped")
        .expect("a data_skipped event");
    assert!(
        skipped > failed && events[skipped]["steps"] == 2,
        "{kinds:?}"
    );
    // The status shows the rollback.
    let rollbacks = st["pipeline"]["rollbacks"]
        .as_array()
        .expect("pipeline.rollbacks");
    assert_eq!(rollbacks.len(), 1, "{st:#}");
    assert_eq!(rollbacks[0]["from_step"], 60);
    assert_eq!(rollbacks[0]["to_step"], 62);
    assert_eq!(st["training"]["step"], 80 + 40 + 2, "{st:#}");
    let log = show_log();
    assert!(log.contains("rolled back"), "{log}");
    // The steps after the rollback trained other data: not compared.
    d.assert_no_resume_mismatch();
}

/// A learning rate so high that every attempt diverges: rolled back
/// `max_rollbacks` (2) times, then the pipeline fails, naming the divergence.
#[test]
fn a_divergence_that_every_attempt_repeats_fails_after_max_rollbacks() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Lavenderd::with_real_worker(dir.path(), &rollback_config("1.0e3"));
    lavender_testkit::training::write_tokens(&d.data_root);
    d.serve();
    d.start(&[]);
    let st = d.wait_state("failed", Duration::from_secs(180));
    assert_eq!(st["pipeline"]["failure"]["kind"], "diverged", "{st:#}");
    let error = st["pipeline"]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("diverged") && error.contains("supervisor.max_rollbacks"),
        "{st:#}"
    );
    assert_eq!(
        st["pipeline"]["rollbacks"].as_array().map(Vec::len),
        Some(2),
        "{st:#}"
    );
    let run = d.run_dir();
    assert_eq!(lavender::skips::read(&run).unwrap().ranges.len(), 2);
    let failures = std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"kind\":\"failed\""))
        .count();
    assert_eq!(failures, 3, "three attempts, three divergences");
}

/// A run rolled back, then stopped and resumed (`start --resume latest`, a new run
/// directory), ends with the same weights as the same rolled-back run left alone:
/// the checkpoints carry the skip, so the data order replays exactly.
#[test]
fn stop_and_resume_after_a_rollback_is_byte_identical_to_the_run_without_the_stop() {
    let straight_dir = tempfile::tempdir().unwrap();
    let straight = spiking_daemon(straight_dir.path(), &rollback_config("1.0e-2"));
    straight.wait_state("finished", Duration::from_secs(180));
    let expected = final_weights(&straight);

    let dir = tempfile::tempdir().unwrap();
    let d = spiking_daemon(dir.path(), &rollback_config("1.0e-2"));
    // Once the rolled-back worker has trained past the spike, it is frozen (its
    // process group, SIGSTOP) so that the stop lands before it finishes, whatever
    // the machine's speed; the stop's SIGTERM waits for the SIGCONT.
    let mut pid = 0;
    wait_until(
        Duration::from_secs(180),
        "training past the rollback",
        || {
            let st = d.status();
            assert_ne!(
                st["pipeline"]["state"], "finished",
                "the run ended before the stop"
            );
            let past = st["pipeline"]["rollbacks"]
                .as_array()
                .is_some_and(|r| r.len() == 1)
                && st["pipeline"]["state"] == "running"
                && st["training"]["step"].as_u64().is_some_and(|s| s >= 63);
            if past && let Some(p) = d.worker_pid() {
                lavender_testkit::send_signal(-p, libc::SIGSTOP);
                pid = p;
                return true;
            }
            false
        },
    );
    let hb: Value =
        serde_json::from_slice(&std::fs::read(d.run_dir().join("heartbeat.json")).unwrap())
            .unwrap();
    assert!(
        hb["step"].as_u64().unwrap() < 122 && hb["state"] != "finished",
        "{hb}"
    );
    let stop = d
        .cmd()
        .arg("stop")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(T, "the daemon to begin stopping", || {
        d.status()["pipeline"]["state"] == "stopping"
    });
    lavender_testkit::send_signal(-pid, libc::SIGCONT);
    let out = stop.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "the stop did not save: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let first_run = d.run_dir();
    d.start(&["--resume", "latest"]);
    d.wait_state("finished", Duration::from_secs(180));
    assert_ne!(first_run, d.run_dir());
    assert!(
        final_weights(&d) == expected,
        "the stop and resume after the rollback changed the weights"
    );
}

/// The pipeline log (`logs/pipeline_chunk1_*.log`, what `lavenderd logs -f` shows)
/// tells where a run stands: `tail -20` of it mid-run shows the step, the loss and
/// the ETA, and each save in the words of the pushes.
#[test]
fn tail_of_the_pipeline_log_mid_run_shows_step_loss_and_eta() {
    let dir = tempfile::tempdir().unwrap();
    // Pretraining saves at its epochs' ends only: on a fast machine the whole run
    // takes seconds (shorter than the least gap between two progress lines, so the
    // line looked for is the first with a loss), and a saved line every 20 steps would
    // push it out of the last 20 lines before anyone could read it.
    lavender_testkit::training::write_tokens(&dir.path().join("data"));
    let config = train_only("").replacen("checkpoint_every: 20}", "checkpoint_every: 100000}", 1);
    let mut d = Lavenderd::with_real_worker(dir.path(), &config);
    d.serve();
    d.start(&[]);
    let log = d.pipeline_json()["log_file"]
        .as_str()
        .map(PathBuf::from)
        .expect("the pipeline's log");
    assert!(
        log.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("pipeline_chunk1_"),
        "{}",
        log.display()
    );
    let tail = || {
        let out = std::process::Command::new("tail")
            .arg("-20")
            .arg(&log)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // A progress line of a step before the last, i.e. said while the run trains.
    let progress = |text: &str| -> Option<String> {
        text.lines()
            .find(|l| {
                l.contains("lavenderd: step ")
                    && l.contains(" (pretrain): loss ")
                    && l.contains("ETA ")
            })
            .map(str::to_string)
    };
    let deadline = Instant::now() + T;
    let line = loop {
        let text = tail();
        if let Some(line) = progress(&text) {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "no progress line in tail -20 of {}:\n{text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let (step, total): (u64, u64) = line
        .split("lavenderd: step ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|s| s.split_once('/'))
        .and_then(|(s, t)| Some((s.parse().ok()?, t.parse().ok()?)))
        .unwrap_or_else(|| panic!("step/total in {line:?}"));
    assert!(step < total, "said mid-run: {line}");
    println!("pipeline log mid-run: {line}");

    d.wait_state("finished", T);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("lavenderd: checkpoint saved: "), "{text}");
}
