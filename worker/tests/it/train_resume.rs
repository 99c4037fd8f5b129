//! Stop, kill and resume: a resumed run is bitwise identical to a straight one,
//! SIGTERM saves and exits 0, SIGKILL at any moment leaves a loadable checkpoint,
//! including while a save is being written in the background.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use lavender_testkit::training::*;
use lavender_testkit::{events, read_json};

fn train_cmd(root: &Path, run_dir: Option<&Path>, extra: &[&str]) -> std::process::Command {
    let mut c = worker();
    c.arg("train")
        .arg("--data-root")
        .arg(root)
        .args(["--device", "cpu"])
        .args(small_run_args(8, 4, 4, 100))
        .args(["--set", "training.grad_accum=2"])
        .args(extra);
    if let Some(r) = run_dir {
        c.arg("--run-dir").arg(r);
    }
    c
}

/// `train` on the CPU into `run_dir`, the rest of the arguments the caller's.
fn train_into(root: &Path, run_dir: &Path) -> std::process::Command {
    let mut c = worker();
    c.arg("train")
        .arg("--data-root")
        .arg(root)
        .arg("--run-dir")
        .arg(run_dir)
        .args(["--device", "cpu"]);
    c
}

fn final_model(run_dir: &Path) -> Vec<u8> {
    let all = checkpoints(run_dir);
    let last = all.last().expect("a checkpoint");
    assert!(
        last.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("final-"),
        "the newest checkpoint is not the final one: {all:?}"
    );
    std::fs::read(last.join("model.safetensors")).unwrap()
}

/// Trains straight through, then again stopped mid-pretrain and mid-DPO and
/// resumed, both with `extra` arguments; asserts the final weights are byte for
/// byte the same and the histories step for step. Returns both runs' directories.
fn assert_stop_and_resume_is_exact(extra: &[&str]) -> (PathBuf, PathBuf, Vec<tempfile::TempDir>) {
    let straight = tempfile::tempdir().unwrap();
    write_tokens(straight.path());
    let run_a = straight.path().join("checkpoints/run-2026-01-01_00-00-01");
    run_ok(train_cmd(straight.path(), Some(&run_a), &[]).args(extra));

    let resumed = tempfile::tempdir().unwrap();
    write_tokens(resumed.path());
    let run_b = resumed.path().join("checkpoints/run-2026-01-01_00-00-02");
    // Stop mid-pretrain (step 5), then mid-DPO (step 14), then run to the end.
    let out = run_ok(train_cmd(resumed.path(), Some(&run_b), &["--stop-at-step", "5"]).args(extra));
    assert!(String::from_utf8_lossy(&out.stdout).contains("stopped at step 5"));
    assert_eq!(
        read_json(&run_b.join("heartbeat.json"))["state"],
        "stopping"
    );
    run_ok(
        train_cmd(
            resumed.path(),
            None,
            &["--resume", "latest", "--stop-at-step", "14"],
        )
        .args(extra),
    );
    let state = read_json(
        &checkpoints(&run_b)
            .pop()
            .unwrap()
            .join("trainer_state.json"),
    );
    assert_eq!(
        (state["stage"].as_str(), state["step"].as_u64()),
        (Some("dpo"), Some(14))
    );
    run_ok(train_cmd(resumed.path(), None, &["--resume", "latest"]).args(extra));

    assert!(
        final_model(&run_a) == final_model(&run_b),
        "resumed weights differ from the straight run"
    );
    // The resumed run's history is the straight run's, step for step.
    let lr = |run: &Path| -> Vec<(u64, f64)> {
        read_json(&run.join("log_history.json"))
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e.get("loss").is_some())
            .map(|e| (e["step"].as_u64().unwrap(), e["loss"].as_f64().unwrap()))
            .collect()
    };
    assert_eq!(lr(&run_a), lr(&run_b));
    assert_eq!(lr(&run_a).len(), 16, "every step's values were recorded");
    (run_a, run_b, vec![straight, resumed])
}

fn final_state(run_dir: &Path) -> serde_json::Value {
    read_json(
        &checkpoints(run_dir)
            .pop()
            .unwrap()
            .join("trainer_state.json"),
    )
}

/// The dtype of every tensor in a .safetensors file.
fn dtypes(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(_, v)| v["dtype"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn stop_and_resume_reproduces_a_straight_run_bit_for_bit() {
    let (run_a, _, _dirs) = assert_stop_and_resume_is_exact(&[]);
    assert_eq!(
        final_state(&run_a)["precision"],
        "fp32",
        "auto is fp32 on the CPU"
    );
}

/// bf16 autocast on the CPU: still exact across a stop and a resume, and the
/// checkpoints stay fp32.
#[test]
fn bf16_stop_and_resume_reproduces_a_straight_run_bit_for_bit() {
    let (run_a, run_b, _dirs) =
        assert_stop_and_resume_is_exact(&["--set", "training.precision=bf16"]);
    assert_eq!(final_state(&run_b)["precision"], "bf16");
    let started = events(&run_a)
        .into_iter()
        .find(|e| e["kind"] == "run_started")
        .unwrap();
    assert_eq!(started["precision"], "bf16");
    let last = checkpoints(&run_b).pop().unwrap();
    for file in ["model.safetensors", "optimizer.safetensors"] {
        let kinds = dtypes(&last.join(file));
        assert!(
            !kinds.is_empty() && kinds.iter().all(|k| k == "F32"),
            "{file}: {kinds:?}"
        );
    }
    // It trained in another arithmetic than fp32: the losses differ from an fp32 run's.
    let fp32 = tempfile::tempdir().unwrap();
    write_tokens(fp32.path());
    let run_c = fp32.path().join("run");
    run_ok(&mut train_cmd(fp32.path(), Some(&run_c), &[]));
    assert!(
        final_model(&run_c) != final_model(&run_a),
        "bf16 trained exactly as fp32"
    );
}

/// fp16's dynamic loss scale is part of the checkpoint: a resumed run scales as the
/// straight one did (its step count since the last change included), and ends with
/// the same weights.
#[test]
fn fp16_loss_scale_round_trips_through_checkpoints() {
    let (run_a, run_b, _dirs) =
        assert_stop_and_resume_is_exact(&["--set", "training.precision=fp16"]);
    let (a, b) = (final_state(&run_a), final_state(&run_b));
    assert_eq!(b["precision"], "fp16");
    let scaler = &b["loss_scaler"];
    assert!(scaler["scale"].as_f64().unwrap() > 0.0, "{b}");
    // Every step was finite here, so the tracker counts all 16 since training began:
    // a resume that lost it would have counted from its own start (step 14).
    assert_eq!(scaler["growth_tracker"], 16, "{b}");
    assert_eq!(a["loss_scaler"], b["loss_scaler"]);
    let history = read_json(&run_b.join("log_history.json"));
    assert!(
        history
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e.get("loss").is_some())
            .all(|e| e["loss_scale"].as_f64() == Some(65536.0)),
        "each step records its loss scale"
    );
}

/// With `training.ema`, every checkpoint carries the moving average, a resume
/// continues it exactly, and each evaluation reports both losses.
#[test]
fn ema_stop_and_resume_reproduces_a_straight_run_bit_for_bit() {
    let (run_a, run_b, _dirs) =
        assert_stop_and_resume_is_exact(&["--set", "training.ema={decay: 0.8, every: 2}"]);
    let last = |run: &Path| checkpoints(run).pop().unwrap();
    let ema = |run: &Path| std::fs::read(last(run).join("ema.safetensors")).unwrap();
    assert!(ema(&run_a) == ema(&run_b), "resumed moving average differs");
    assert!(
        ema(&run_b) != std::fs::read(last(&run_b).join("model.safetensors")).unwrap(),
        "the average is not the weights"
    );
    for c in checkpoints(&run_b) {
        assert!(c.join("ema.safetensors").is_file(), "{}", c.display());
    }
    // Both validation losses, in the history, the checkpoint and the stage's end.
    let history = read_json(&run_b.join("log_history.json"));
    let evals: Vec<&serde_json::Value> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("eval_loss").is_some())
        .collect();
    assert!(!evals.is_empty());
    for e in &evals {
        assert!(e["eval_ema_loss"].as_f64().unwrap().is_finite(), "{e}");
    }
    assert!(
        evals.iter().any(|e| e["eval_ema_loss"] != e["eval_loss"]),
        "the average evaluated as the weights"
    );
    let state = final_state(&run_b);
    assert!(state["eval"]["ema_loss"].as_f64().is_some(), "{state}");
    let finished: Vec<serde_json::Value> = events(&run_b)
        .into_iter()
        .filter(|e| e["kind"] == "stage_finished")
        .collect();
    assert_eq!(finished.len(), 3);
    assert!(
        finished
            .iter()
            .all(|e| e["ema_eval_loss"].as_f64().is_some())
    );
    assert!(
        events(&run_b)
            .iter()
            .filter(|e| e["kind"] == "checkpoint_saved")
            .all(|e| e["ema_eval_loss"].as_f64().is_some())
    );
}

fn wait_for_step(run_dir: &Path, child: &mut Child, step: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(child.try_wait().unwrap().is_none(), "worker exited early");
        if let Ok(bytes) = std::fs::read(run_dir.join("heartbeat.json"))
            && let Ok(hb) = serde_json::from_slice::<serde_json::Value>(&bytes)
            && hb["step"].as_u64().unwrap_or(0) >= step
        {
            return;
        }
        assert!(Instant::now() < deadline, "no heartbeat at step {step}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Returns once the heartbeat of `child` (in any run under `ckroot`) reports step
/// `step` or later, or once it has exited.
fn wait_for_child_step(ckroot: &Path, child: &mut Child, step: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid = u64::from(child.id());
    loop {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        let runs = std::fs::read_dir(ckroot).into_iter().flatten();
        let reached = runs.filter_map(|e| e.ok()).any(|run| {
            std::fs::read(run.path().join("heartbeat.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .is_some_and(|hb| {
                    hb["pid"].as_u64() == Some(pid) && hb["step"].as_u64() >= Some(step)
                })
        });
        if reached {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the worker never reached step {step}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as i32, sig) };
}

#[test]
fn sigterm_finishes_the_step_saves_and_exits_zero_even_when_repeated() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-03");
    let mut child = train_into(root.path(), &run_dir)
        .args(small_run_args(100_000, 10, 10, 100_000))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_step(&run_dir, &mut child, 3);
    // The worker re-executes itself for a short OpenMP spin: same pid, so the
    // daemon's pid and signals still reach it.
    let environ = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
    assert!(
        environ
            .split(|&b| b == 0)
            .any(|kv| kv == b"GOMP_SPINCOUNT=10000"),
        "GOMP_SPINCOUNT=10000 not in the worker's environment"
    );
    assert_eq!(
        read_json(&run_dir.join("heartbeat.json"))["pid"],
        child.id()
    );
    signal(&child, libc::SIGTERM);
    // A second signal while the save is under way must not cut it short.
    std::thread::sleep(Duration::from_millis(2));
    signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");

    let hb = read_json(&run_dir.join("heartbeat.json"));
    assert_eq!(hb["state"], "stopping");
    let ckpts = checkpoints(&run_dir);
    assert_eq!(ckpts.len(), 1, "exactly one save, on the signal");
    let state = read_json(&ckpts[0].join("trainer_state.json"));
    assert_eq!(state["step"], hb["step"], "saved the last finished step");
    assert_eq!(
        hb["latest_checkpoint"].as_str(),
        ckpts[0].file_name().unwrap().to_str()
    );
    assert!(ckpts[0].join("optimizer.safetensors").is_file());
    let evs = events(&run_dir);
    assert!(evs.iter().any(|e| e["kind"] == "checkpoint_saved"));
    let log = std::fs::read_to_string(run_dir.join("train.log")).unwrap();
    assert!(log.contains("SAVE pretrain-"), "{log}");
}

#[test]
fn sigkill_at_random_moments_always_leaves_a_resumable_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let ckroot = root.path().join("checkpoints");
    let total = 60u64;
    let args = small_run_args(40, 10, 10, 2);
    let mut rng = 0x9E37_79B9u64;
    let mut newest_step = 0u64;
    let mut kills = 0;
    for _ in 0..12 {
        let mut cmd = worker();
        cmd.arg("train")
            .arg("--data-root")
            .arg(root.path())
            .args(["--device", "cpu"])
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if newest_step > 0 {
            cmd.args(["--resume", "latest"]);
        }
        let mut child = cmd.spawn().unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // The kill comes at a random step of this run (before its last few), plus a
        // random few milliseconds: counted in steps, not in time from the spawn, it
        // lands mid-run on a machine of any speed (start-up alone can outlast a fixed
        // window on a slow or loaded one, and a whole run fit in it on a fast one).
        let target = (newest_step + 1 + rng % 12).min(total - 4);
        wait_for_child_step(&ckroot, &mut child, target);
        std::thread::sleep(Duration::from_millis((rng >> 8) % 10));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            kills += 1;
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() || out.status.code().is_none(),
            "worker failed on its own: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The newest complete checkpoint never goes backwards and always loads.
        let runs: Vec<PathBuf> = match std::fs::read_dir(&ckroot) {
            Ok(d) => d.map(|e| e.unwrap().path()).collect(),
            Err(_) => continue,
        };
        let mut all: Vec<PathBuf> = runs.iter().flat_map(|r| checkpoints(r)).collect();
        all.sort_by_key(|p| read_json(&p.join("trainer_state.json"))["step"].as_u64());
        if let Some(newest) = all.last() {
            let step = read_json(&newest.join("trainer_state.json"))["step"]
                .as_u64()
                .unwrap();
            assert!(
                step >= newest_step,
                "newest checkpoint went back from {newest_step} to {step}"
            );
            newest_step = step;
            for f in ["model.safetensors", "optimizer.safetensors"] {
                assert!(
                    newest.join(f).is_file(),
                    "{f} missing in {}",
                    newest.display()
                );
            }
        }
        if out.status.success() {
            break;
        }
    }
    assert!(
        kills >= 3,
        "only {kills} kills happened; the test did not exercise anything"
    );
    // Finish the run: resume must succeed and reach the end.
    let out = run_ok(
        worker()
            .arg("train")
            .arg("--data-root")
            .arg(root.path())
            .args(["--device", "cpu", "--resume", "latest"])
            .args(&args),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("step {total}")), "{stdout}");
    // Runs killed before their first save hold no checkpoint; all saves went to one run.
    let runs: Vec<PathBuf> = std::fs::read_dir(&ckroot)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|r| !checkpoints(r).is_empty())
        .collect();
    assert_eq!(
        runs.len(),
        1,
        "--resume latest reuses the run directory: {runs:?}"
    );
    let history = read_json(&runs[0].join("log_history.json"));
    let steps: Vec<u64> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("loss").is_some())
        .map(|e| e["step"].as_u64().unwrap())
        .collect();
    assert_eq!(
        steps,
        (1..=total).collect::<Vec<u64>>(),
        "dense history without repeats"
    );
}

#[test]
fn resuming_into_a_new_chunk_continues_the_weights_from_step_zero_in_a_new_run() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let base = |chunk: &str| {
        let mut c = worker();
        c.arg("train")
            .arg("--data-root")
            .arg(root.path())
            .args(["--device", "cpu", "--chunk", chunk])
            .args(small_run_args(6, 2, 2, 100));
        c
    };
    run_ok(&mut base("1"));
    let out = run_ok(base("2").args(["--resume", "latest"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("finished at step 10"));

    let mut runs: Vec<PathBuf> = std::fs::read_dir(root.path().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    runs.sort();
    assert_eq!(
        runs.len(),
        2,
        "chunk 2 trains in a run of its own: {runs:?}"
    );
    let second = &runs[1];
    let loaded: Vec<_> = events(second)
        .into_iter()
        .filter(|e| e["kind"] == "checkpoint_loaded")
        .collect();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0]["new_chunk"], true);
    assert!(loaded[0]["name"].as_str().unwrap().starts_with("final-"));
    let started = events(second)
        .into_iter()
        .find(|e| e["kind"] == "run_started")
        .unwrap();
    assert_eq!(started["chunk"], 2);
    assert_eq!(started["shards"], serde_json::json!(["shard-00001"]));
    // Its history is its own: steps 1..=10 of chunk 2.
    let history = read_json(&second.join("log_history.json"));
    let first_step = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e.get("loss").is_some());
    assert_eq!(first_step.unwrap()["step"], 1);
    // Moments came along with the weights (no fresh-moments warning).
    assert!(!String::from_utf8_lossy(&out.stderr).contains("fresh AdamW moments"));
}

/// The staged (uncommitted) checkpoint directories of a run that hold written files.
fn staged_with_files(run_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(run_dir)
        .map(|d| {
            d.map(|e| e.unwrap().path())
                .filter(|p| {
                    p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with(".tmp-")
                        && p.join("model.safetensors").is_file()
                        && p.join("optimizer.safetensors").is_file()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A save is written, fsynced and committed on a background thread while training
/// goes on; a kill before its commit must leave the previous checkpoint the newest
/// complete one, and a resume from it must end where a straight run does.
#[test]
fn a_kill_while_a_save_is_written_in_the_background_keeps_the_previous_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    // A run directory by the usual name: the resume continues in it.
    let run_dir = root.path().join("checkpoints/run-2026-01-01_00-00-03");
    // Saves every 2 steps; the second save (step 4) writes its files and never commits.
    let mut child = train_into(root.path(), &run_dir)
        .args(["--hold-save", "2"])
        .args(small_run_args(40, 10, 10, 2))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Training goes on while that save is in flight (step 5 comes after it) ...
    wait_for_step(&run_dir, &mut child, 5);
    let deadline = Instant::now() + Duration::from_secs(60);
    while staged_with_files(&run_dir).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the held save never staged its files"
        );
        assert!(child.try_wait().unwrap().is_none(), "worker exited early");
        std::thread::sleep(Duration::from_millis(5));
    }
    // ... and the kill lands while it is still uncommitted.
    child.kill().unwrap();
    child.wait().unwrap();
    let complete = checkpoints(&run_dir);
    let steps: Vec<u64> = complete
        .iter()
        .map(|c| {
            read_json(&c.join("trainer_state.json"))["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        steps,
        [2],
        "the previous checkpoint stays the newest complete one"
    );
    assert_eq!(
        staged_with_files(&run_dir).len(),
        1,
        "the in-flight save stayed staged"
    );

    // Resuming uses it and runs to the end ...
    let out = run_ok(
        worker()
            .arg("train")
            .arg("--data-root")
            .arg(root.path())
            .args(["--device", "cpu", "--resume"])
            .arg(&run_dir)
            .args(small_run_args(40, 10, 10, 2)),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("step 60"), "{stdout}");
    // ... with the weights of a run that was never interrupted.
    let straight = tempfile::tempdir().unwrap();
    write_tokens(straight.path());
    let straight_run = straight.path().join("run");
    run_ok(train_into(straight.path(), &straight_run).args(small_run_args(40, 10, 10, 2)));
    assert!(
        final_model(&run_dir) == final_model(&straight_run),
        "resumed weights differ from the straight run"
    );
}

/// A rollback's record (`<run>/skipped.json`, range (4, 12]) makes the resume from
/// checkpoint 4 pass over the data steps 5..=12 consumed: pretraining's last four
/// steps' batches, and the first four of SFT's, whose stage starts after them. A
/// run stopped and resumed twice on the way (mid-pretraining, mid-SFT) ends with the
/// same weights as the one that went straight through: each checkpoint records how
/// many ranges its cursor includes and what is still to skip at the next stage.
#[test]
fn skipped_data_is_skipped_once_and_a_stop_after_it_resumes_exactly() {
    let prepare = |name: &str| {
        let root = tempfile::tempdir().unwrap();
        write_tokens(root.path());
        let run = root
            .path()
            .join(format!("checkpoints/run-2026-01-01_00-00-0{name}"));
        run_ok(&mut train_cmd(
            root.path(),
            Some(&run),
            &["--stop-at-step", "4"],
        ));
        let ck = checkpoints(&run).pop().unwrap();
        lavender::skips::append(
            &run,
            lavender::skips::SkipRange {
                from_step: 4,
                to_step: 12,
                checkpoint: ck.file_name().unwrap().to_string_lossy().into_owned(),
                reason: "loss spike".into(),
                at: "2026-01-01T00:00:00Z".into(),
            },
        )
        .unwrap();
        (root, run)
    };
    let per_step = 4 * 2; // batch_size × grad_accum
    let cursor = |run: &Path, step: u64| {
        let ck = checkpoints(run)
            .into_iter()
            .find(|c| read_json(&c.join("trainer_state.json"))["step"] == step)
            .unwrap_or_else(|| panic!("no checkpoint at step {step}"));
        read_json(&ck.join("trainer_state.json"))
    };

    let (straight_root, straight) = prepare("1");
    run_ok(&mut train_cmd(
        straight_root.path(),
        None,
        &["--resume", "latest"],
    ));
    let skipped: Vec<_> = events(&straight)
        .into_iter()
        .filter(|e| e["kind"] == "data_skipped")
        .collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(
        (skipped[0]["step"].as_u64(), skipped[0]["steps"].as_u64()),
        (Some(4), Some(8))
    );

    let (stopped_root, stopped) = prepare("2");
    run_ok(&mut train_cmd(
        stopped_root.path(),
        None,
        &["--resume", "latest", "--stop-at-step", "6"],
    ));
    let st = cursor(&stopped, 6);
    // Pretraining drew 4 + 4 skipped + 2 steps' batches; SFT still skips 4 steps'.
    assert_eq!(
        st["data_cursor"]["index"].as_u64(),
        Some((4 + 4 + 2) * per_step)
    );
    assert_eq!(st["data_cursor"]["skip_steps"].as_u64(), Some(4));
    assert_eq!(st["skips_applied"].as_u64(), Some(1));
    run_ok(&mut train_cmd(
        stopped_root.path(),
        None,
        &["--resume", "latest", "--stop-at-step", "10"],
    ));
    let st = cursor(&stopped, 10);
    assert_eq!(st["stage"], "sft");
    assert_eq!(
        st["data_cursor"]["index"].as_u64(),
        Some((4 + 2) * per_step)
    );
    assert_eq!(st["data_cursor"].get("skip_steps"), None);
    run_ok(&mut train_cmd(
        stopped_root.path(),
        None,
        &["--resume", "latest"],
    ));
    // Only the first resume skipped anything.
    assert_eq!(
        events(&stopped)
            .iter()
            .filter(|e| e["kind"] == "data_skipped")
            .count(),
        1
    );
    assert!(
        final_model(&straight) == final_model(&stopped),
        "stopping and resuming after a skip changed the weights"
    );

    // And the skip is real: without it the run ends elsewhere.
    let plain = tempfile::tempdir().unwrap();
    write_tokens(plain.path());
    let run = plain.path().join("checkpoints/run-2026-01-01_00-00-03");
    run_ok(&mut train_cmd(plain.path(), Some(&run), &[]));
    assert!(final_model(&run) != final_model(&straight));
}

/// A checkpoint taken mid-DPO whose run folder lost its DPO reference (a restore that
/// brought the checkpoint alone, a file deleted by hand): the resume fails as
/// `missing_run_file` (exit 84), naming the file, not as `data` ("the training data is
/// missing or corrupt": the wrong cause and the wrong advice).
#[test]
fn a_mid_dpo_checkpoint_without_its_reference_is_a_missing_run_file() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let run = root.path().join("checkpoints/run-2026-01-01_00-00-03");
    run_ok(&mut train_cmd(
        root.path(),
        Some(&run),
        &["--stop-at-step", "14"],
    ));
    let state = read_json(&checkpoints(&run).pop().unwrap().join("trainer_state.json"));
    assert_eq!(state["stage"].as_str(), Some("dpo"), "{state}");
    std::fs::remove_file(run.join(lavender::run::DPO_REFERENCE_FILE)).unwrap();
    let out = train_cmd(root.path(), None, &["--resume", "latest"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(lavender::failure::FailureKind::MissingRunFile.exit_code()),
        "{said}"
    );
    assert!(
        said.contains("dpo-reference.safetensors") && said.contains("which is not there"),
        "{said}"
    );
    let hb = read_json(&run.join("heartbeat.json"));
    assert_eq!(hb["failure"]["kind"], "missing_run_file", "{hb}");
}
