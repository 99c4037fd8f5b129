//! A whole `train` run over synthetic token arrays: pretrain → sft → dpo → final.

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

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
        .filter(|e| e.get("loss").is_some())
        .collect();
    assert_eq!(steps.len(), 40);
    for (i, e) in steps.iter().enumerate() {
        assert_eq!(e["step"], i as u64 + 1);
        for k in ["epoch", "loss", "grad_norm"] {
            assert!(e[k].is_number(), "{k} in {e}");
        }
    }

    // The run describes itself: config (momentum in SOURCE's meaning, 0.0 for
    // AdamW, with β1 under its own name), tokenizer, train.log.
    let config = fs::read_to_string(run_dir.join("config.yaml")).unwrap();
    assert!(config.contains("momentum: 0.0"), "{config}");
    assert!(config.contains("adam_beta1: 0.9"), "{config}");
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

/// A learning rate far too high blows the loss up within a few steps: the worker
/// stops with `diverged` (exit 80), its last heartbeat and a `failed` event saying
/// where the divergence began, and saves nothing of the diverged state.
#[test]
fn a_diverging_run_stops_with_diverged_and_saves_nothing_after_it() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-00");
    let out = cpu_train(root.path())
        .arg("--run-dir")
        .arg(&run_dir)
        .args(small_run_args(200, 2, 2, 2))
        .args(diverging_run_args())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(80), "{stderr}");
    assert!(
        stderr.contains("training diverged") && stderr.contains("lower the stage's lr"),
        "{stderr}"
    );
    let hb = read_json(&run_dir.join("heartbeat.json"));
    assert_eq!(hb["state"], "failed");
    let failure = &hb["failure"];
    assert_eq!(failure["kind"], "diverged", "{hb}");
    let (step, since) = (
        failure["step"].as_u64().unwrap(),
        failure["since_step"].as_u64().unwrap(),
    );
    assert!(since <= step && step < 200, "{failure}");
    let evs = events(&run_dir);
    let failed = evs
        .iter()
        .find(|e| e["kind"] == "failed")
        .expect("a failed event");
    assert_eq!(&failed["failure"], failure);
    assert!(failed["message"].as_str().unwrap().contains("diverged"));
    // Saves before the detection only (one under way may complete); no final one.
    for c in checkpoints(&run_dir) {
        let st = read_json(&c.join("trainer_state.json"));
        assert!(
            st["step"].as_u64().unwrap() < step,
            "{} saved at {st}",
            c.display()
        );
        assert!(
            !c.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("final-")
        );
    }
    assert!(evs.iter().all(|e| e["kind"] != "final_saved"));
}

/// The worker runs `args` in a run directory the caller made (as lavenderd does);
/// returns its exit code, stderr and the failure its last heartbeat records.
fn fails(root: &Path, run_dir: &Path, args: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    fs::create_dir_all(run_dir).unwrap();
    let out = cpu_train(root)
        .arg("--run-dir")
        .arg(run_dir)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let hb = fs::read(run_dir.join("heartbeat.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .unwrap_or_default();
    if out.status.code() != Some(0) {
        assert_eq!(hb["state"], "failed", "{hb}\n{stderr}");
        let failed = events(run_dir)
            .into_iter()
            .rfind(|e| e["kind"] == "failed")
            .unwrap_or_else(|| panic!("no failed event\n{stderr}"));
        assert_eq!(failed["failure"], hb["failure"]);
    }
    (out.status.code(), stderr, hb["failure"].clone())
}

/// Each kind of failure the daemon tells apart has its exit code, its heartbeat
/// record and its event (the code alone when the worker cannot even start).
#[test]
fn failures_say_their_kind_in_the_heartbeat_the_event_and_the_exit_code() {
    let root = tempfile::tempdir().unwrap();
    let runs = root.path().join("checkpoints");
    let small: Vec<String> = small_run_args(4, 1, 1, 2);
    let small: Vec<&str> = small.iter().map(String::as_str).collect();

    // data: no tokens/ yet.
    let (code, stderr, f) = fails(root.path(), &runs.join("run-2026-01-01_00-00-01"), &small);
    assert_eq!(code, Some(65), "{stderr}");
    assert_eq!(f["kind"], "data");
    assert!(f["message"].as_str().unwrap().contains("precompute"), "{f}");

    write_tokens(root.path());
    // config: a value the config rejects, and an argument the worker does not take.
    let mut bad = small.clone();
    bad.extend(["--set", "training.spike.window=0"]);
    let (code, stderr, f) = fails(root.path(), &runs.join("run-2026-01-01_00-00-02"), &bad);
    assert_eq!(code, Some(78), "{stderr}");
    assert_eq!(f["kind"], "config");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("training.spike.window"),
        "{f}"
    );
    let out = cpu_train(root.path())
        .arg("--no-such-flag")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // incompatible_checkpoint: the checkpoint is from a narrower model.
    let first = runs.join("run-2026-01-01_00-00-03");
    let (code, stderr, _) = fails(root.path(), &first, &small);
    assert_eq!(code, Some(0), "{stderr}");
    let mut wider = small.clone();
    wider.extend(["--set", "model.n_embd=64", "--resume", "latest"]);
    let (code, stderr, f) = fails(root.path(), &runs.join("run-2026-01-01_00-00-04"), &wider);
    assert_eq!(code, Some(79), "{stderr}");
    assert_eq!(f["kind"], "incompatible_checkpoint");
    assert!(f["message"].as_str().unwrap().contains("shape"), "{f}");

    // out_of_memory: libtorch cannot allocate the model.
    let mut huge = small.clone();
    huge.extend(["--set", "model.n_embd=1048576"]);
    let (code, stderr, f) = fails(root.path(), &runs.join("run-2026-01-01_00-00-05"), &huge);
    assert_eq!(code, Some(81), "{stderr}");
    assert_eq!(f["kind"], "out_of_memory", "{f}");

    // crash: anything else (here the run directory is a file).
    let file = runs.join("not-a-directory");
    fs::write(&file, b"").unwrap();
    let out = cpu_train(root.path())
        .arg("--run-dir")
        .arg(&file)
        .args(&small)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls the heartbeat until the child exits; the states it said, in order.
fn watch_states(run_dir: &Path, child: &mut std::process::Child) -> Vec<(String, u64)> {
    let mut seen: Vec<(String, u64)> = Vec::new();
    while child.try_wait().unwrap().is_none() {
        if let Ok(bytes) = fs::read(run_dir.join("heartbeat.json"))
            && let Ok(hb) = serde_json::from_slice::<serde_json::Value>(&bytes)
        {
            let now = (
                hb["state"].as_str().unwrap_or("").to_string(),
                hb["step"].as_u64().unwrap_or(0),
            );
            if seen.last() != Some(&now) {
                seen.push(now);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    seen
}

/// The heartbeat says `loading` while a checkpoint is read, `evaluating` while the
/// model is evaluated, `saving` while a save holds training (waiting for the
/// previous one included): each phase gets the daemon's allowance for it.
#[test]
fn the_heartbeat_says_each_phase_that_holds_training() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    // A held-out set large enough that evaluating takes a while.
    write_validation(root.path(), 200_000);
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-00");
    let slow = [
        "--set",
        "training.eval_batches=2000",
        "--set",
        "model.n_embd=128",
        "--set",
        "model.n_layer=2",
    ];
    run_ok(
        cpu_train(root.path())
            .arg("--run-dir")
            .arg(&run_dir)
            .args(small_run_args(2, 1, 1, 100))
            .args(slow)
            .args(["--stop-at-step", "1"]),
    );
    // The resume reads the weights from a pipe that the test fills once the
    // heartbeat says `loading`: the phase lasts exactly as long as the test wants.
    let ck = checkpoints(&run_dir).pop().unwrap();
    let weights = fs::read(ck.join("model.safetensors")).unwrap();
    fs::remove_file(ck.join("model.safetensors")).unwrap();
    let fifo = std::ffi::CString::new(ck.join("model.safetensors").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mut child = cpu_train(root.path())
        .args(small_run_args(2, 1, 1, 100))
        .args(slow)
        .args(["--resume", "latest"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    lavender_testkit::wait_until(Duration::from_secs(60), "a loading heartbeat", || {
        fs::read(run_dir.join("heartbeat.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|hb| hb["state"] == "loading" && hb["pid"] == child.id())
    });
    let writer = std::thread::spawn({
        let path = ck.join("model.safetensors");
        move || fs::write(path, weights).unwrap()
    });
    let seen = watch_states(&run_dir, &mut child);
    writer.join().unwrap();
    assert!(child.wait().unwrap().success());
    let states: Vec<&str> = seen.iter().map(|(s, _)| s.as_str()).collect();
    // The held-out evaluations at the sft and dpo stages' starts, and the final save.
    let evaluating = seen.iter().filter(|(s, _)| s == "evaluating").count();
    assert!(evaluating >= 1, "{seen:?}");
    assert!(states.contains(&"saving"), "{seen:?}");
    assert_eq!(states.last(), Some(&"finished"), "{seen:?}");
    // After a phase, the worker is training (or starting, before its first step).
    for pair in seen.windows(2) {
        if ["loading", "evaluating"].contains(&pair[0].0.as_str()) {
            assert!(
                ["starting", "training", "evaluating", "saving", "loading"]
                    .contains(&pair[1].0.as_str()),
                "{seen:?}"
            );
        }
    }

    // A save waiting for the previous one (held in flight) says `saving`, and
    // training stands still until that one is durable.
    let held = root.path().join("checkpoints/run-2026-01-01_00-00-09");
    let child = cpu_train(root.path())
        .arg("--run-dir")
        .arg(&held)
        .args(small_run_args(8, 1, 1, 2))
        .args(["--hold-save", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let watched = std::thread::spawn({
        let held = held.clone();
        move || watch_states_timed(&held, child)
    });
    let saving_at_4 = || {
        fs::read(held.join("heartbeat.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|hb| hb["state"] == "saving" && hb["step"] == 4)
    };
    lavender_testkit::wait_until(Duration::from_secs(60), "saving at step 4", saving_at_4);
    let saw_saving = Instant::now();
    // The first save (step 2) is in flight: its files are staged, nothing committed.
    lavender_testkit::wait_until(Duration::from_secs(60), "the held save's files", || {
        fs::read_dir(&held).unwrap().flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with(".tmp-")
                && e.path().join("model.safetensors").is_file()
        })
    });
    assert!(
        checkpoints(&held).is_empty(),
        "the held save is not committed"
    );
    assert!(
        saving_at_4(),
        "still saving at step 4 while the first save is held"
    );
    fs::write(held.join(".tmp-release-held-save"), "").unwrap();
    let released = Instant::now();
    let (seen, status) = watched.join().unwrap();
    assert!(status.success(), "{seen:?}");
    // Nothing after step 4 happened before the held save was released ...
    let early: Vec<&(String, u64, Instant)> = seen
        .iter()
        .filter(|(_, step, at)| *step > 4 && *at < released)
        .collect();
    assert!(
        early.is_empty(),
        "training went on during the save: {early:?}"
    );
    // ... and the worker's own account: the save at step 4 reported after the held one,
    // having waited for it at least as long as the test held it after seeing `saving`.
    let saved: Vec<(u64, f64)> = events(&held)
        .iter()
        .filter(|e| e["kind"] == "checkpoint_saved")
        .map(|e| (e["step"].as_u64().unwrap(), e["wait_s"].as_f64().unwrap()))
        .collect();
    assert_eq!(saved[..2].iter().map(|s| s.0).collect::<Vec<_>>(), [2, 4]);
    let held_for = (released - saw_saving).as_secs_f64();
    assert!(
        saved[1].1 >= held_for,
        "the save at step 4 waited {} s for the held one, held {held_for} s after it said saving",
        saved[1].1
    );
}

/// Polls the heartbeat until the child exits: each state it said with when it was
/// first seen, and the exit status.
fn watch_states_timed(
    run_dir: &Path,
    mut child: std::process::Child,
) -> (Vec<(String, u64, Instant)>, std::process::ExitStatus) {
    let mut seen: Vec<(String, u64, Instant)> = Vec::new();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (seen, status);
        }
        if let Ok(bytes) = fs::read(run_dir.join("heartbeat.json"))
            && let Ok(hb) = serde_json::from_slice::<serde_json::Value>(&bytes)
        {
            let now = (
                hb["state"].as_str().unwrap_or("").to_string(),
                hb["step"].as_u64().unwrap_or(0),
            );
            if seen.last().map(|(s, n, _)| (s, *n)) != Some((&now.0, now.1)) {
                seen.push((now.0, now.1, Instant::now()));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
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
        include_str!("../../../daemon/tests/fixtures/worker-checkpoint-saved.jsonl")
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

/// A corrupted passage of the corpus, drawn at steps 61 and 62, spikes the loss at
/// exactly those steps (the model has learnt the rest by then): the worker stops
/// with `diverged` since step 61, saving nothing after. Rolled back by hand as
/// lavenderd does (resume from the checkpoint before step 61 with the range
/// recorded in skipped.json), the run skips those batches and finishes.
#[test]
fn a_corrupt_passage_spikes_at_its_steps_and_skipping_its_batches_cures_the_run() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    // seed 1337 (the default), seq_len 16, batch_size 4 × grad_accum 1.
    assert_eq!(
        poison_pretraining_steps(root.path(), 1337, 16, 4, 61..=62),
        8
    );
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-00");
    let train = || {
        let mut c = cpu_train(root.path());
        c.arg("--run-dir")
            .arg(&run_dir)
            .args(small_run_args(80, 2, 2, 10))
            .args(spiking_run_args());
        c
    };
    let out = train().output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(80), "{stderr}");
    let failure = read_json(&run_dir.join("heartbeat.json"))["failure"].clone();
    assert_eq!(
        (
            failure["kind"].as_str(),
            failure["step"].as_u64(),
            failure["since_step"].as_u64()
        ),
        (Some("diverged"), Some(62), Some(61)),
        "{failure}"
    );
    // The spike is the passage's: the steps before it are well below it.
    let losses: Vec<f64> = fs::read_to_string(run_dir.join("log_history.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["loss"].as_f64())
        .collect();
    assert_eq!(losses.len(), 62);
    let calm = losses[40..60].iter().cloned().fold(0.0, f64::max);
    assert!(losses[60] > 3.0 * calm, "{losses:?}");
    let before = checkpoints(&run_dir).pop().unwrap();
    let state = read_json(&before.join("trainer_state.json"));
    assert_eq!(state["step"], 60, "{state}");

    lavender::skips::append(
        &run_dir,
        lavender::skips::SkipRange {
            from_step: 60,
            to_step: 62,
            checkpoint: before.file_name().unwrap().to_string_lossy().into_owned(),
            reason: failure["message"].as_str().unwrap().to_string(),
            at: "2026-01-01T00:00:00Z".into(),
        },
    )
    .unwrap();
    let out = run_ok(train().arg("--resume").arg(&before));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("training finished at step 84"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
