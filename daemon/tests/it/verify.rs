//! `lavenderd verify`: every checkpoint of a data root checked against its
//! manifest, without a daemon. The checkpoints are written by the real
//! `lavender-worker` (BLAKE3) and by `lavender_protocol` (SHA-256), then damaged on
//! disk as a disk or a person would: a file cut short, one byte flipped, a file
//! deleted, the manifest deleted.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use lavender_testkit::python::venv_tool;
use lavender_testkit::training::{checkpoints, cpu_train, run_ok, small_run_args, write_tokens};
use lavender_testkit::{lavenderd, repo};
use serde_json::Value;

const WORKER_RUN: &str = "run-2026-01-01_00-00-01";
const PYTHON_RUN: &str = "run-2026-01-01_00-00-02";

fn verify(root: &Path, args: &[&str]) -> Output {
    Command::new(lavenderd())
        .arg("--data-root")
        .arg(root)
        .arg("verify")
        .args(args)
        .env("HOME", root)
        .env_remove("XDG_DATA_HOME")
        .env_remove("LAVENDER_DATA_ROOT")
        .env_remove("LAVENDER_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The report line of checkpoint `name` (and the damage lines under it).
fn lines_of(out: &Output, name: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut found = Vec::new();
    let mut inside = false;
    for line in stdout.lines() {
        if line.contains(name) {
            inside = true;
        } else if !line.starts_with(' ') {
            inside = false;
        }
        if inside {
            found.push(line.to_string());
        }
    }
    found.join("\n")
}

/// A data root with two runs: the real worker's (five checkpoints) and, newer, one
/// written through `lavender_protocol`'s `Worker.save` (two).
fn data_root() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let worker_run = root.path().join("checkpoints").join(WORKER_RUN);
    run_ok(
        cpu_train(root.path())
            .arg("--run-dir")
            .arg(&worker_run)
            .args(small_run_args(6, 2, 2, 2))
            .args(["--set", "training.keep_checkpoints=10"]),
    );
    let python_run = root.path().join("checkpoints").join(PYTHON_RUN);
    let script = r#"
import sys
from pathlib import Path
from lavender_protocol import Worker
w = Worker(Path(sys.argv[1]), total_steps=4, handle_signals=False)
w.start(step=0)
for step in (2, 4):
    w.step(step, loss=1.0, lr=1e-3)
    def write(d, step=step):
        (d / "model.bin").write_bytes(bytes(range(256)) * 4000 + bytes([step]))
        (d / "sub").mkdir()
        (d / "sub" / "extra.json").write_text("{}")
    w.save(step, write)
w.finished()
"#;
    let out = Command::new(venv_tool("python"))
        .args(["-c", script])
        .arg(&python_run)
        .env("PYTHONPATH", repo().join("python/src"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    (root, worker_run, python_run)
}

#[test]
fn verify_names_each_damaged_checkpoint_and_fails_only_when_one_is() {
    let (root, worker_run, python_run) = data_root();
    let root = root.path();

    // Default: the newest run, here the Python one: its SHA-256 manifests verify.
    let out = verify(root, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let py = checkpoints(&python_run);
    assert_eq!(py.len(), 2, "{py:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(WORKER_RUN), "{}", text(&out));
    for ck in &py {
        let name = ck.file_name().unwrap().to_string_lossy();
        assert!(
            lines_of(&out, &name).contains("verified (3 file(s)"),
            "{}",
            text(&out)
        );
    }

    let all = checkpoints(&worker_run);
    assert!(all.len() >= 5, "{all:?}");
    let out = verify(root, &["--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let summary = format!(
        "{} checkpoint(s): {} verified, 0 damaged",
        all.len() + 2,
        all.len() + 2
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&summary),
        "{}",
        text(&out)
    );

    // The damage, newest first.
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let n = all.len();
    let (truncated, flipped, missing, no_manifest) =
        (&all[n - 1], &all[n - 2], &all[n - 3], &all[n - 4]);
    let model = truncated.join("model.safetensors");
    let size = std::fs::metadata(&model).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap();
    f.set_len(size / 2).unwrap();
    drop(f);
    let opt = flipped.join("optimizer.safetensors");
    let mut bytes = std::fs::read(&opt).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 0x01;
    std::fs::write(&opt, &bytes).unwrap();
    std::fs::remove_file(missing.join("optimizer.safetensors")).unwrap();
    std::fs::remove_file(no_manifest.join("manifest.json")).unwrap();

    let out = verify(root, &["--run", WORKER_RUN]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = |p: &Path| lines_of(&out, &name(p));
    assert!(
        report(truncated).contains(&format!(
            "damaged: model.safetensors: {} bytes, the manifest says {size}",
            size / 2
        )),
        "{}",
        text(&out)
    );
    assert!(
        report(flipped).contains("damaged: optimizer.safetensors: content hash"),
        "{}",
        text(&out)
    );
    assert!(
        report(missing).contains("damaged: optimizer.safetensors: missing"),
        "{}",
        text(&out)
    );
    assert!(
        report(no_manifest).contains("unverified (no manifest.json)"),
        "{}",
        text(&out)
    );
    for intact in &all[..n - 4] {
        assert!(report(intact).contains("verified ("), "{}", text(&out));
    }
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!(
            "{n} checkpoint(s): {} verified, 3 damaged, 1 unverified",
            n - 4
        )),
        "{}",
        text(&out)
    );

    // Recorded: `checkpoints` shows what verify found.
    let listed = Command::new(lavenderd())
        .arg("--data-root")
        .arg(root)
        .args(["checkpoints", "--run", WORKER_RUN])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let row = |p: &Path| {
        listed
            .lines()
            .find(|l| l.starts_with(&format!("{}  ", name(p))))
            .unwrap_or_else(|| panic!("no row for {}: {listed}", name(p)))
            .to_string()
    };
    for p in [truncated, flipped, missing] {
        assert!(row(p).contains("  damaged"), "{listed}");
    }
    assert!(row(no_manifest).contains("  unverified"), "{listed}");
    assert!(row(&all[0]).contains("  verified"), "{listed}");

    // The same as JSON, each checkpoint's verdict and damage spelled out.
    let out = verify(root, &["--run", WORKER_RUN, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (doc["damaged"].as_u64(), doc["unverified"].as_u64()),
        (Some(3), Some(1))
    );
    let entry = |p: &Path| {
        doc["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["checkpoint"] == name(p).as_str())
            .cloned()
            .unwrap()
    };
    let t = entry(truncated);
    assert_eq!(t["verdict"], "damaged");
    assert_eq!(t["damage"][0]["problem"], "size");
    assert_eq!(t["damage"][0]["expected"], size);
    assert_eq!(entry(flipped)["damage"][0]["problem"], "hash");
    assert_eq!(entry(missing)["damage"][0]["problem"], "missing");
    assert_eq!(entry(no_manifest)["verdict"], "unverified");
    assert_eq!(entry(&all[0])["verdict"], "verified");

    // --all sees the damage too; the intact Python run alone still passes.
    assert_eq!(verify(root, &["--all"]).status.code(), Some(1));
    assert_eq!(verify(root, &["--run", PYTHON_RUN]).status.code(), Some(0));

    // A flipped byte in a Python-written file is caught by its SHA-256.
    let py_model = py[1].join("model.bin");
    let mut bytes = std::fs::read(&py_model).unwrap();
    bytes[7] ^= 0x80;
    std::fs::write(&py_model, &bytes).unwrap();
    let out = verify(root, &["--run", PYTHON_RUN]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        lines_of(&out, &name(&py[1])).contains("damaged: model.bin: content hash"),
        "{}",
        text(&out)
    );

    // The commit marker is covered: a step changed in `trainer_state.json`, the JSON
    // still valid, is damage, in a checkpoint of each writer.
    for ckpt in [&all[0], &py[0]] {
        let state = ckpt.join("trainer_state.json");
        let mut doc: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        doc["step"] = (doc["step"].as_u64().unwrap() + 1).into();
        std::fs::write(&state, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    }
    for run in [WORKER_RUN, PYTHON_RUN] {
        let out = verify(root, &["--run", run]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    }
    let out = verify(root, &["--all"]);
    for ckpt in [&all[0], &py[0]] {
        assert!(
            lines_of(&out, &name(ckpt)).contains("damaged: trainer_state.json: "),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn verify_of_a_run_that_is_not_there_says_how_to_find_one() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("checkpoints").join(WORKER_RUN)).unwrap();
    let out = verify(root.path(), &["--run", "run-2026-13-01_00-00-00"]);
    // Not damage (1): the check could not run.
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no run \"run-2026-13-01_00-00-00\" under")
            && err.contains("`lavenderd runs` lists them"),
        "{}",
        text(&out)
    );
    // An empty run: nothing to check, nothing wrong.
    let out = verify(root.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no complete checkpoints in"),
        "{}",
        text(&out)
    );
}
