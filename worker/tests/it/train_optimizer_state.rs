//! `training.save_optimizer_state: none | last | all`, and resuming without moments.

use std::path::Path;

use lavender_testkit::training::*;
use lavender_testkit::{events, read_json};

fn run(root: &Path, mode: &str, extra: &[&str]) -> std::process::Output {
    run_ok(
        worker()
            .arg("train")
            .arg("--data-root")
            .arg(root)
            .args(["--device", "cpu"])
            .args(small_run_args(6, 2, 2, 2))
            .args(["--set", "training.keep_checkpoints=10"])
            .args(["--set", &format!("training.save_optimizer_state={mode}")])
            .args(extra),
    )
}

fn run_dir(root: &Path) -> std::path::PathBuf {
    std::fs::read_dir(root.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !checkpoints(p).is_empty())
        .unwrap()
}

fn with_moments(root: &Path) -> Vec<bool> {
    checkpoints(&run_dir(root))
        .iter()
        .map(|c| c.join("optimizer.safetensors").is_file())
        .collect()
}

#[test]
fn all_keeps_moments_in_every_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    run(root.path(), "all", &[]);
    let m = with_moments(root.path());
    assert!(m.len() >= 4 && m.iter().all(|&x| x), "{m:?}");
    let last = checkpoints(&run_dir(root.path())).pop().unwrap();
    let state = read_json(&last.join("trainer_state.json"));
    assert_eq!(state["optimizer_state"], true);
}

#[test]
fn last_keeps_moments_only_in_the_newest_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    run(root.path(), "last", &[]);
    let m = with_moments(root.path());
    assert!(m.len() >= 4, "{m:?}");
    assert!(*m.last().unwrap(), "{m:?}");
    assert!(m[..m.len() - 1].iter().all(|&x| !x), "{m:?}");
}

#[test]
fn none_writes_no_moments_and_a_resume_warns_once_and_starts_fresh() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    run(root.path(), "none", &["--stop-at-step", "4"]);
    let m = with_moments(root.path());
    assert!(!m.is_empty() && m.iter().all(|&x| !x), "{m:?}");

    let out = run(root.path(), "none", &["--resume", "latest"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("fresh AdamW moments").count(),
        1,
        "warns exactly once: {stderr}"
    );
    let loaded: Vec<_> = events(&run_dir(root.path()))
        .into_iter()
        .filter(|e| e["kind"] == "checkpoint_loaded")
        .collect();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0]["optimizer_state"], false);
    let hb = read_json(&run_dir(root.path()).join("heartbeat.json"));
    assert_eq!(hb["state"], "finished");
}
