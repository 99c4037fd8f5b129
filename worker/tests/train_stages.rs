//! A whole `train` run over synthetic token arrays: pretrain → sft → dpo → final.

mod train_support;

use std::fs;

use train_support::*;

#[test]
fn runs_every_stage_and_leaves_the_run_self_describing() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-00");
    let out = run_ok(
        worker()
            .arg("train")
            .arg("--data-root")
            .arg(root.path())
            .arg("--run-dir")
            .arg(&run_dir)
            .args(["--device", "cpu"])
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
    let out = worker()
        .arg("train")
        .arg("--data-root")
        .arg(root.path())
        .arg("--run-dir")
        .arg(&run_dir)
        .args(["--device", "cpu"])
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

#[test]
fn cuda_without_a_gpu_is_refused_with_what_to_do() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let out = worker()
        .arg("train")
        .arg("--data-root")
        .arg(root.path())
        .args(["--device", "cuda"])
        .args(small_run_args(2, 1, 1, 100))
        .output()
        .unwrap();
    if out.status.success() {
        // A machine with a GPU trains on it; nothing to refuse.
        return;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--device cuda") && stderr.contains("--device auto or cpu"),
        "{stderr}"
    );
}
