//! Every checkpoint `lavender-worker` saves carries `manifest.json` (each file's size
//! and BLAKE3 hash, taken from the bytes as they were written; `trainer_state.json`'s
//! from the bytes about to be written), durable before `trainer_state.json`, and the
//! manifest verifies when the files are read back.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use lavender::checkpoint::contents::{self, Depth, HashAlgorithm, Verdict};
use lavender_testkit::training::*;

/// Every regular file under `dir` (relative, `/`-separated) but the manifest: what
/// the manifest must list (the marker `trainer_state.json` included, once committed).
fn payload_files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                if rel != contents::FILE {
                    out.push(rel);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn run_dir(root: &Path) -> PathBuf {
    std::fs::read_dir(root.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !checkpoints(p).is_empty())
        .expect("a run with checkpoints")
}

/// The manifest of `ck` lists exactly its files, in BLAKE3, and verifies in full.
fn assert_manifest_verifies(ck: &Path) {
    let manifest = contents::read(ck)
        .unwrap()
        .unwrap_or_else(|| panic!("{} has no manifest", ck.display()));
    assert_eq!(manifest.algorithm, HashAlgorithm::Blake3);
    let listed: Vec<String> = manifest.files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(listed, payload_files(ck), "{}", ck.display());
    match contents::verify(ck, Depth::Full, None) {
        Verdict::Verified { files, .. } => assert_eq!(files, listed.len()),
        other => panic!("{}: {other:?}", ck.display()),
    }
}

/// A small run of `steps` (a checkpoint every 2) under `root`, keeping every
/// checkpoint, with one more `--set`; its checkpoints (at least four).
fn train_keeping_all(root: &Path, steps: u64, set: &str) -> Vec<PathBuf> {
    write_tokens(root);
    run_ok(
        worker()
            .arg("train")
            .arg("--data-root")
            .arg(root)
            .args(["--device", "cpu"])
            .args(small_run_args(steps, 2, 2, 2))
            .args(["--set", "training.keep_checkpoints=10"])
            .args(["--set", set]),
    );
    let all = checkpoints(&run_dir(root));
    assert!(all.len() >= 4, "{all:?}");
    all
}

#[test]
fn every_saved_checkpoint_has_a_manifest_that_lists_and_verifies_its_files() {
    let root = tempfile::tempdir().unwrap();
    let all = train_keeping_all(root.path(), 4, "training.ema={decay: 0.8, every: 2}");
    for ck in &all {
        assert_manifest_verifies(ck);
        let files = payload_files(ck);
        for f in [
            "model.safetensors",
            "optimizer.safetensors",
            "ema.safetensors",
        ] {
            assert!(files.iter().any(|x| x == f), "{}: no {f}", ck.display());
        }
    }
    // The hashes are of the bytes on disk: one byte flipped is seen.
    let last = all.last().unwrap();
    let model = last.join("model.safetensors");
    let mut bytes = std::fs::read(&model).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x40;
    std::fs::write(&model, &bytes).unwrap();
    assert!(contents::verify(last, Depth::Full, None).is_damaged());
    // So is a step changed in the marker, its JSON still valid.
    let before = &all[all.len() - 2];
    let state = before.join("trainer_state.json");
    let text = std::fs::read_to_string(&state).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let step = doc["step"].as_u64().unwrap();
    std::fs::write(
        &state,
        text.replacen(
            &format!("\"step\": {step}"),
            &format!("\"step\": {}", step + 1),
            1,
        ),
    )
    .unwrap();
    let Verdict::Damaged { damage } = contents::verify(before, Depth::Full, None) else {
        panic!("a changed step verified");
    };
    assert!(
        damage
            .iter()
            .any(|d| d.to_string().starts_with("trainer_state.json: ")),
        "{damage:?}"
    );
}

/// `save_optimizer_state: last` deletes the older checkpoints' moments: their
/// manifests drop the file first, so they still verify.
#[test]
fn older_checkpoints_without_their_moments_still_verify() {
    let root = tempfile::tempdir().unwrap();
    let all = train_keeping_all(root.path(), 6, "training.save_optimizer_state=last");
    for ck in &all {
        assert_manifest_verifies(ck);
    }
    assert!(!all[0].join("optimizer.safetensors").exists());
    assert!(all.last().unwrap().join("optimizer.safetensors").exists());
}

/// The staged (uncommitted) checkpoint directories of a run.
fn staged(run_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(run_dir)
        .map(|d| {
            d.map(|e| e.unwrap().path())
                .filter(|p| {
                    p.is_dir()
                        && p.file_name()
                            .unwrap()
                            .to_string_lossy()
                            .starts_with(".tmp-")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A save held before its commit (`--hold-save`): the tensors and the manifest are
/// on disk, the marker is not; the manifest already verifies the staged files. A
/// kill there leaves a checkpoint that is not complete, never a complete one without
/// its manifest.
#[test]
fn the_manifest_is_on_disk_before_the_marker() {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let run = root.path().join("checkpoints/run-2026-01-01_00-00-05");
    let mut child = worker()
        .arg("train")
        .arg("--data-root")
        .arg(root.path())
        .arg("--run-dir")
        .arg(&run)
        .args(["--device", "cpu", "--hold-save", "1"])
        .args(small_run_args(40, 10, 10, 2))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let dir = loop {
        if let Some(d) = staged(&run)
            .into_iter()
            .find(|d| d.join(contents::FILE).is_file())
        {
            break d;
        }
        assert!(
            Instant::now() < deadline,
            "the held save never wrote its manifest"
        );
        assert!(child.try_wait().unwrap().is_none(), "worker exited early");
        std::thread::sleep(Duration::from_millis(10));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !dir.join("trainer_state.json").exists(),
        "the marker came with the manifest"
    );
    // The staged files are listed and verify; the marker is not there to cover yet.
    let manifest = contents::read(&dir).unwrap().unwrap();
    let listed: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(listed, payload_files(&dir), "{}", dir.display());
    assert!(matches!(
        contents::verify(&dir, Depth::Full, Some(&listed)),
        Verdict::Verified { .. }
    ));
    assert!(checkpoints(&run).is_empty(), "a held save was committed");
}
