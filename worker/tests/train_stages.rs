//! A whole `train` run over synthetic token arrays: pretrain → sft → dpo → final.

use std::fs;

use lavender_testkit::training::*;
use lavender_testkit::{events, read_json};

#[test]
fn runs_every_stage_and_leaves_the_run_self_describing() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-00");
    let out = run_ok(
        cpu_train(root.path())
            .arg("--run-dir")
            .arg(&run_dir)
            .args(small_run_args(20, 10, 10, 10)),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("training finished at step 40"), "{stdout}");

    // Heartbeat: finished, at the last step, naming the final checkpoint.
    let hb = read_json(&run_dir.join("heartbeat.json"));
    assert_eq!(hb["state"], "finished");
    assert_eq!(hb["step"], 40);
    assert_eq!(hb["total_steps"], 40);
    let latest = hb["latest_checkpoint"].as_str().unwrap().to_string();
    assert!(latest.starts_with("final-"), "{latest}");
    assert!(hb["loss_smooth"].as_f64().unwrap().is_finite());

    // Checkpoints: retention kept 3, the newest is the final one, complete.
    let ckpts = checkpoints(&run_dir);
    assert_eq!(ckpts.len(), 3, "{ckpts:?}");
    let last = ckpts.last().unwrap();
    assert_eq!(last.file_name().unwrap().to_string_lossy(), latest);
    for f in [
        "model.safetensors",
        "optimizer.safetensors",
        "trainer_state.json",
    ] {
        assert!(last.join(f).is_file(), "{f} in {}", last.display());
    }
    let state = read_json(&last.join("trainer_state.json"));
    assert_eq!(state["stage"], "final");
    assert_eq!(state["step"], 40);

    // Stage boundaries and saves are milestones.
    let evs = events(&run_dir);
    let kinds: Vec<&str> = evs.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for k in [
        "run_started",
        "stage_started",
        "stage_finished",
        "checkpoint_saved",
        "final_saved",
    ] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    assert_eq!(kinds.iter().filter(|k| **k == "stage_started").count(), 3);
    let saved: Vec<_> = evs
        .iter()
        .filter(|e| e["kind"] == "checkpoint_saved")
        .collect();
    assert!(saved.iter().any(|e| e["ce_loss"].is_number()));
    assert!(saved.iter().any(|e| e["sft_loss"].is_number()));
    assert!(
        saved
            .iter()
            .all(|e| e["epochs"].is_number() && e.get("remaining_hours").is_some())
    );
    // The last stage's end is the final checkpoint, not a second identical save.
    assert!(
        !saved
            .iter()
            .any(|e| e["name"].as_str().unwrap().starts_with("dpo-") && e["step"] == 40)
    );

    // log_history.json: one entry per step with HF keys, plus evaluations.
    let history = read_json(&run_dir.join("log_history.json"));
    let steps: Vec<&serde_json::Value> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("learning_rate").is_some())
        .collect();
    assert_eq!(steps.len(), 40);
    for (i, e) in steps.iter().enumerate() {
        assert_eq!(e["step"], i as u64 + 1);
        for k in ["epoch", "loss", "grad_norm"] {
            assert!(e[k].is_number(), "{k} in {e}");
        }
    }

    // The run describes itself: config (with momentum), tokenizer, train.log.
    let config = fs::read_to_string(run_dir.join("config.yaml")).unwrap();
    assert!(config.contains("momentum: 0.9"), "{config}");
    assert!(config.contains("n_embd: 32"), "{config}");
    assert_eq!(
        fs::read(run_dir.join("tokenizer.json")).unwrap(),
        fs::read(root.path().join("tokens/tokenizer.json")).unwrap()
    );
    let log = fs::read_to_string(run_dir.join("train.log")).unwrap();
    assert!(log.contains("CKPT run-dir"), "{log}");
    assert!(log.contains(&format!("SAVE {latest} @ ")), "{log}");
    assert!(log.contains("RETAIN dropped"), "{log}");
}

#[test]
fn a_diverging_run_ends_failed_with_an_error_event_and_a_clear_message() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-00");
    let out = cpu_train(root.path())
        .arg("--run-dir")
        .arg(&run_dir)
        .args(small_run_args(200, 2, 2, 100))
        .args(["--set", "training.stages[0].lr=1.0e12"])
        .args(["--set", "optimizer.grad_clip=0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("loss became") && stderr.contains("lower the stage's lr"),
        "{stderr}"
    );
    assert_eq!(
        read_json(&run_dir.join("heartbeat.json"))["state"],
        "failed"
    );
    let evs = events(&run_dir);
    let err = evs
        .iter()
        .find(|e| e["kind"] == "error")
        .expect("an error event");
    assert!(err["message"].as_str().unwrap().contains("loss became"));
}

/// A GPU the machine does not have is refused, saying what to do, whether the
/// machine has CUDA devices (then it counts them) or none.
#[test]
fn a_cuda_device_that_is_not_there_is_refused_with_what_to_do() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let out = worker()
        .arg("train")
        .arg("--data-root")
        .arg(root.path())
        .args(["--device", "cuda:99"])
        .args(small_run_args(2, 1, 1, 100))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--device cuda:99")
            && (stderr.contains("--device auto or cpu")
                || stderr.contains("CUDA device(s), numbered")),
        "{stderr}"
    );
    let out = worker()
        .arg("train")
        .arg("--data-root")
        .arg(root.path())
        .args(["--device", "gpu"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("`gpu` is not a device")
            && stderr.contains("cuda:N"),
        "{stderr}"
    );
}

/// `make test-gpu` is for machines with a GPU: where CUDA sees none (here, hidden
/// by CUDA_VISIBLE_DEVICES on any machine) it fails at once and says why.
#[test]
fn make_test_gpu_fails_clearly_without_a_cuda_device() {
    let out = std::process::Command::new("bash")
        .arg(lavender_testkit::repo().join("scripts/test-gpu.sh"))
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("make test-gpu: no CUDA device here")
            && stderr.contains("CUDA_VISIBLE_DEVICES=''")
            && stderr.contains("run it on a machine with one"),
        "{stderr}"
    );
}

/// The worker is one process on one device: several Slurm tasks in its config, or a
/// WORLD_SIZE above 1 (torchrun), make it refuse to start with the `config` exit code,
/// naming the multi-GPU path, before it writes anything.
#[test]
fn several_processes_are_refused_with_the_config_exit_code() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let refused = |cmd: &mut std::process::Command, what: &str| {
        let out = cmd.args(small_run_args(2, 1, 1, 100)).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(lavender::failure::FailureKind::Config.exit_code()),
            "{stderr}"
        );
        assert!(
            stderr.contains(what)
                && stderr.contains("one process on one device")
                && stderr.contains("torchrun")
                && stderr.contains("docs/PYTHON.md"),
            "{stderr}"
        );
    };
    refused(
        cpu_train(root.path()).args(["--set", "launch.slurm.ntasks=2"]),
        "launch.slurm.ntasks",
    );
    // Started by a wrapper the config check cannot see through: still refused.
    refused(
        cpu_train(root.path()).args([
            "--set",
            "launch.slurm.ntasks=2",
            "--set",
            "worker.command=[torchrun, train.py]",
        ]),
        "launch.slurm.ntasks",
    );
    refused(
        cpu_train(root.path()).env("WORLD_SIZE", "2"),
        "WORLD_SIZE: 2 processes",
    );
    assert!(
        !root.path().join("checkpoints").exists(),
        "nothing written before refusing"
    );
    // WORLD_SIZE=1 is one process.
    run_ok(
        cpu_train(root.path())
            .env("WORLD_SIZE", "1")
            .args(small_run_args(2, 1, 1, 100)),
    );
}

/// Retention keeps each stage's best checkpoint by its `val_loss`, so that loss must
/// be an evaluation of the checkpoint itself: every save, in every stage (the stop's
/// and the final one too), records the evaluation made at its own step, even when
/// `training.eval_every` would not evaluate there.
#[test]
fn every_checkpoints_validation_loss_is_evaluated_at_its_own_step() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-00");
    let args = |extra: &[&str]| {
        let mut c = cpu_train(root.path());
        c.args(small_run_args(6, 6, 6, 3))
            .args(["--set", "training.eval_every=1000"])
            .args(["--set", "training.keep_checkpoints=100"])
            .args(extra);
        c
    };
    // A stop at step 4 saves between two regular saves (3 and 6).
    run_ok(
        args(&["--stop-at-step", "4"])
            .arg("--run-dir")
            .arg(&run_dir),
    );
    run_ok(&mut args(&["--resume", "latest"]));

    let history = read_json(&run_dir.join("log_history.json"));
    let evals: Vec<(u64, String, f64)> = history
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            Some((
                e["step"].as_u64()?,
                e["stage"].as_str()?.to_string(),
                e.get("eval_loss")?.as_f64()?,
            ))
        })
        .collect();
    let ckpts = checkpoints(&run_dir);
    let mut seen = Vec::new();
    for c in &ckpts {
        let st = read_json(&c.join("trainer_state.json"));
        let step = st["step"].as_u64().unwrap();
        let stage = match st["stage"].as_str().unwrap() {
            "final" => "dpo",
            s => s,
        };
        let val = st["val_loss"]
            .as_f64()
            .unwrap_or_else(|| panic!("{} has no val_loss: {st}", c.display()));
        let at_step = evals
            .iter()
            .rev()
            .find(|(s, g, _)| *s == step && g == stage)
            .unwrap_or_else(|| panic!("no {stage} evaluation at step {step}: {evals:?}"));
        assert_eq!(
            val,
            at_step.2,
            "{}: the evaluation at its step",
            c.display()
        );
        seen.push((stage.to_string(), step));
    }
    for stage in ["pretrain", "sft", "dpo"] {
        assert!(seen.iter().any(|(s, _)| s == stage), "{stage}: {seen:?}");
    }
    assert!(
        seen.contains(&("pretrain".to_string(), 4)),
        "the stop's save: {seen:?}"
    );
}

/// The daemon's milestone formatter is tested on `checkpoint_saved` events recorded
/// from this worker (daemon/tests/fixtures/worker-checkpoint-saved.jsonl, lines of a
/// tiny run's `events.jsonl`: 27 pretrain steps, 3 epochs, a save every 3 steps).
/// The events it writes today must still have the recorded ones' fields, of the same
/// JSON types, with the epoch as fractional progress: else that test tests a shape
/// the worker no longer writes, and the fixture must be recorded again.
#[test]
fn checkpoint_saved_events_keep_the_shape_the_milestone_fixture_recorded() {
    let recorded: Vec<serde_json::Value> =
        include_str!("../../daemon/tests/fixtures/worker-checkpoint-saved.jsonl")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-00");
    run_ok(
        cpu_train(root.path())
            .arg("--run-dir")
            .arg(&run_dir)
            .args(small_run_args(9, 1, 1, 3)),
    );
    let written: Vec<serde_json::Value> = events(&run_dir)
        .into_iter()
        .filter(|e| e["kind"] == "checkpoint_saved" && e["stage"] == "pretrain")
        .collect();
    assert!(!written.is_empty());
    let type_of = |v: &serde_json::Value| match v {
        serde_json::Value::Number(n) if n.is_u64() => "integer",
        serde_json::Value::Number(_) => "float",
        serde_json::Value::String(_) => "string",
        other => panic!("unexpected {other}"),
    };
    let shape = |e: &serde_json::Value| -> Vec<(String, &'static str)> {
        let mut s: Vec<_> = [
            "name", "path", "step", "stage", "epoch", "epochs", "ce_loss",
        ]
        .iter()
        .map(|k| (k.to_string(), type_of(&e[*k])))
        .collect();
        s.sort();
        s
    };
    for e in &written {
        assert_eq!(shape(e), shape(&recorded[0]), "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains(", epoch ") && message.contains(", CE "),
            "{message}"
        );
    }
    assert!(
        written
            .iter()
            .any(|e| e["epoch"].as_f64().unwrap().fract() != 0.0),
        "the epoch is fractional progress, as recorded: {written:?}"
    );
}
