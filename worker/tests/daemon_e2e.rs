//! The real `lavenderd` supervising the real `lavender-worker`, end to end, at
//! tiny scale on a small generated corpus: start → status running → stop saves a
//! checkpoint (the stop's answer names it) → start --resume latest continues from
//! that step → finished. Every status read is checked against the schema.
//!
//! The daemon is the `lavenderd` binary beside this package's worker binary:
//! `cargo test --workspace` builds both before any test runs; for this package
//! alone build it first with `cargo build -p lavenderd`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lavender_testkit::{Lavenderd, WORDS, wait_until, write_speeches};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(60);

/// The smallest pipeline that still runs every step: a one-layer model, short
/// stages, a heartbeat every step and a save every few.
fn config(corpus: &Path) -> String {
    format!(
        r#"steps: [downloads, dedup, filter, build_shards, precompute, train, mine_hard]
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
    for step in ["downloads", "dedup", "filter", "build_shards", "precompute"] {
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
