//! A bucket is untrusted input, against a real S3 server (SeaweedFS): remote copies
//! crafted behind lavender's back (an absolute or `..` entry path, a run of `/…` or
//! `..`, a manifest naming another key, a symbolic link in the way, an object longer
//! than its entry) are each refused by `lavenderd pull`, naming why, and a file
//! planted outside the data root is byte-identical afterwards; a well-formed copy
//! beside them is pulled. With `replicate.signing_key_file`, a copy altered in the
//! bucket (objects and both manifests changed together) is refused and the signed one
//! before it restored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lavender::checkpoint::contents::HashAlgorithm;
use lavender_testkit::s3::S3;
use lavender_testkit::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);
const RUN: &str = "run-2026-01-01_00-00-00";

fn env(replicate: &str) -> Env {
    Env::new(
        &[
            "--total-steps",
            "20",
            "--step-ms",
            "5",
            "--checkpoint-every",
            "5",
        ],
        &format!("notify:\n  desktop: false\n{replicate}"),
        "[train]",
    )
}

fn blake3(bytes: &[u8]) -> String {
    let mut h = HashAlgorithm::Blake3.hasher();
    h.update(bytes);
    h.finish_hex()
}

fn entry(path: &str, bytes: &[u8]) -> Value {
    json!({"path": path, "size": bytes.len(), "hash": blake3(bytes)})
}

/// A remote copy of `RUN/ckpt` as lavender writes one (weights, trainer state,
/// content manifest, then the remote manifest), with `edit` applied to the remote
/// manifest and `objects` put beside it (key below the checkpoint, bytes).
fn craft(
    s3: &S3,
    prefix: &str,
    ckpt: &str,
    completed_ms: u64,
    edit: impl FnOnce(&mut Value),
    objects: &[(&str, &[u8])],
) {
    let weights = b"weights".repeat(100);
    let state = serde_json::to_vec(&json!({"step": 5, "stage": "pretrain"})).unwrap();
    let content = serde_json::to_vec(&json!({
        "format": "lavender.checkpoint-manifest", "version": 1, "algorithm": "blake3",
        "files": [entry("model.safetensors", &weights)],
    }))
    .unwrap();
    let mut remote = json!({
        "format": "lavender.remote-checkpoint", "version": 1,
        "run": RUN, "checkpoint": ckpt, "stage": "pretrain", "step": 5, "val_loss": null,
        "completed_unix_ms": completed_ms, "uploaded_at": "2026-01-01T00:00:01.000Z",
        "algorithm": "blake3",
        "files": [
            entry("model.safetensors", &weights),
            entry("trainer_state.json", &state),
            entry("manifest.json", &content),
        ],
    });
    let key = |file: &str| format!("{prefix}/{RUN}/{ckpt}/{file}");
    s3.put(&key("model.safetensors"), &weights);
    s3.put(&key("trainer_state.json"), &state);
    s3.put(&key("manifest.json"), &content);
    for (file, bytes) in objects {
        s3.put(&key(file), bytes);
    }
    edit(&mut remote);
    s3.put(
        &key("lavender-remote.json"),
        &serde_json::to_vec(&remote).unwrap(),
    );
}

fn add_entry(path: &str, bytes: &[u8]) -> impl FnOnce(&mut Value) {
    let e = entry(path, bytes);
    move |m: &mut Value| m["files"].as_array_mut().unwrap().push(e)
}

/// Every file under `dir` with its bytes, for before/after comparisons.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(p);
            } else if t.is_file() {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            } else {
                out.push((p.clone(), Vec::new()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_crafted_bucket_is_refused_and_touches_nothing_outside_the_checkpoint() {
    let s3 = S3::start();
    let d = env(&s3.replicate_yaml("crafted"));
    // The operator's files outside the data root.
    let home = d.dir.path().join("home");
    std::fs::create_dir_all(home.join("u")).unwrap();
    let planted = home.join("u").join(".bashrc");
    std::fs::write(&planted, b"the operator's own file\n").unwrap();
    let before = snapshot(&home);
    let evil = b"echo pwned\n".to_vec();
    let abs = planted.display().to_string();
    let abs_key = abs.trim_start_matches('/').to_string();
    let dotdot = "../../../home/u/.bashrc";

    // (checkpoint, what the refusal names); each newer than the good one.
    let cases: Vec<(&str, &str)> = vec![
        ("pretrain-00-00-02-0002", "an absolute path"),
        ("pretrain-00-00-03-0003", "a `..` component"),
        ("pretrain-00-00-04-0004", "is not a run name"),
        ("pretrain-00-00-05-0005", "is not a run name"),
        ("pretrain-00-00-06-0006", "but is listed under"),
        ("pretrain-00-00-07-0007", "longer than the"),
    ];
    craft(&s3, "crafted", "pretrain-00-00-01-0001", 1_000, |_| {}, &[]);
    craft(
        &s3,
        "crafted",
        cases[0].0,
        2_000,
        add_entry(&abs, &evil),
        &[(&abs_key, &evil)],
    );
    craft(
        &s3,
        "crafted",
        cases[1].0,
        3_000,
        add_entry(dotdot, &evil),
        // No object at that key: an HTTP client folds the `..` away.
        &[],
    );
    // A run naming a folder of the operator's (whose removal a restore would do).
    let home_u = home.join("u").display().to_string();
    craft(
        &s3,
        "crafted",
        cases[2].0,
        4_000,
        |m| m["run"] = json!(home_u),
        &[],
    );
    craft(
        &s3,
        "crafted",
        cases[3].0,
        5_000,
        |m| m["run"] = json!(".."),
        &[],
    );
    craft(
        &s3,
        "crafted",
        cases[4].0,
        6_000,
        |m| m["checkpoint"] = json!("pretrain-00-00-01-0001"),
        &[],
    );
    // The weights object is a megabyte; its entry says 700 bytes.
    craft(
        &s3,
        "crafted",
        cases[5].0,
        7_000,
        |_| {},
        &[("model.safetensors", &vec![7u8; 1 << 20])],
    );

    let checkpoints = d.data_root.join("checkpoints");
    for (ckpt, says) in &cases {
        let out = d.run(&["pull", RUN, ckpt]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{ckpt}: {}", stdout(&out));
        assert!(
            err.contains("refused") && err.contains(says) && err.contains(ckpt),
            "{ckpt}: {err}"
        );
        assert!(
            !checkpoints.join(RUN).join(ckpt).exists(),
            "{ckpt} was created"
        );
    }
    assert_eq!(
        snapshot(&home),
        before,
        "a file outside the data root changed"
    );

    // What the refused pulls left of the run folder: nothing.
    if checkpoints.join(RUN).exists() {
        std::fs::remove_dir(checkpoints.join(RUN)).expect("an empty run folder");
    }
    // A symbolic link in the way: the run folder links outside the data root.
    let outside = d.dir.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(&checkpoints).unwrap();
    std::os::unix::fs::symlink(&outside, checkpoints.join(RUN)).unwrap();
    let out = d.run(&["pull", RUN, "pretrain-00-00-01-0001"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("is a symbolic link: a restore never follows one"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    std::fs::remove_file(checkpoints.join(RUN)).unwrap();

    // The newest that is whole: every crafted one passed over, named; the good one pulled.
    let out = d.run(&["pull"]);
    let said = stdout(&out);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    for (ckpt, _) in &cases {
        assert!(
            said.lines()
                .any(|l| l.starts_with(&format!("passed over {RUN}/{ckpt}: "))
                    && l.contains("refused")),
            "{ckpt}: {said}"
        );
    }
    assert!(
        said.contains(&format!(
            "pulled s3://lavender-test/crafted/{RUN}/pretrain-00-00-01-0001"
        )),
        "{said}"
    );
    let pulled = checkpoints.join(RUN).join("pretrain-00-00-01-0001");
    assert_eq!(
        std::fs::read(pulled.join("model.safetensors")).unwrap(),
        b"weights".repeat(100)
    );
    assert_eq!(
        snapshot(&home),
        before,
        "a file outside the data root changed"
    );
    let names: Vec<String> = std::fs::read_dir(checkpoints.join(RUN))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["pretrain-00-00-01-0001"], "nothing else was left");
}

#[test]
fn a_signed_copy_altered_in_the_bucket_is_refused_and_the_one_before_restored() {
    let s3 = S3::start();
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("signing.key");
    std::fs::write(&key_file, format!("{}\n", "k7Qz".repeat(11))).unwrap();
    let yaml = format!(
        "{}  signing_key_file: {}\n",
        s3.replicate_yaml("signed"),
        key_file.display()
    );
    let mut d = env(&yaml);
    d.serve();
    d.start(&[]);
    d.wait_state("finished", T);
    let run = d.run_name();
    wait_until(T, "every checkpoint of the run remote", || {
        super::replicate_faults::every_checkpoint_remote(&d, &run)
    });
    // The newest remote copy, by when it was completed.
    let remote: Value = s3
        .keys(&format!("signed/{run}/"))
        .into_iter()
        .filter(|k| k.ends_with("/lavender-remote.json"))
        .map(|k| serde_json::from_slice::<Value>(&s3.get(&k)).unwrap())
        .max_by_key(|m| m["completed_unix_ms"].as_u64().unwrap())
        .unwrap();
    let newest_key = format!("signed/{run}/{}", remote["checkpoint"].as_str().unwrap());
    assert!(
        remote["signature"]
            .as_str()
            .is_some_and(|s| s.starts_with("blake3-keyed:")),
        "{remote}"
    );
    // The newest copy altered whole: new weights, both manifests made to agree.
    let newest = remote["checkpoint"].as_str().unwrap().to_string();
    let mut m = remote.clone();
    let weights_path = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .find(|p| p != "trainer_state.json" && p != "manifest.json")
        .unwrap();
    let evil = b"weights the key never signed".to_vec();
    s3.put(&format!("{newest_key}/{weights_path}"), &evil);
    let mut content: Value =
        serde_json::from_slice(&s3.get(&format!("{newest_key}/manifest.json"))).unwrap();
    for f in content["files"].as_array_mut().unwrap() {
        if f["path"] == json!(weights_path) {
            *f = entry(&weights_path, &evil);
        }
    }
    let content = serde_json::to_vec(&content).unwrap();
    s3.put(&format!("{newest_key}/manifest.json"), &content);
    for f in m["files"].as_array_mut().unwrap() {
        if f["path"] == json!(weights_path) {
            *f = entry(&weights_path, &evil);
        } else if f["path"] == json!("manifest.json") {
            *f = entry("manifest.json", &content);
        }
    }
    s3.put(
        &format!("{newest_key}/lavender-remote.json"),
        &serde_json::to_vec(&m).unwrap(),
    );
    std::fs::remove_dir_all(d.data_root.join("checkpoints")).unwrap();

    let out = d.run(&["pull", &run, &newest]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("refused") && stderr(&out).contains("does not verify"),
        "{}",
        stderr(&out)
    );
    assert!(
        !d.data_root
            .join("checkpoints")
            .join(&run)
            .join(&newest)
            .exists()
    );

    let out = d.run(&["pull"]);
    let said = stdout(&out);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    assert!(
        said.contains(&format!("passed over {run}/{newest}: ")) && said.contains("does not verify"),
        "{said}"
    );
    assert!(said.contains("pulled s3://lavender-test/signed/"), "{said}");
}

/// `config check` says what a restore trusts; a signing key inside the data root is
/// refused, naming both.
#[test]
fn config_check_says_what_a_restore_trusts_and_refuses_a_key_beside_the_checkpoints() {
    let d = env("replicate:\n  url: s3://team-bucket/runs\n");
    let out = d.run(&["config", "check"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("no replicate.signing_key_file, so a restore trusts s3://team-bucket/runs"),
        "{}",
        stderr(&out)
    );

    // A relative path is taken from the config's folder, where the data root is too.
    let d = env("replicate:\n  url: s3://team-bucket/runs\n  signing_key_file: data/signing.key\n");
    std::fs::create_dir_all(&d.data_root).unwrap();
    std::fs::write(d.data_root.join("signing.key"), "k".repeat(44)).unwrap();
    let out = d.run(&["config", "check"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("is inside the data root") && stderr(&out).contains("signing.key"),
        "{}",
        stderr(&out)
    );
}
