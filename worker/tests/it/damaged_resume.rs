//! A damaged checkpoint costs minutes, not the run: the real `lavenderd` supervising
//! the real `lavender-worker`, the worker frozen (SIGSTOP, so no save is in flight),
//! its newest checkpoint(s) damaged on disk as a disk error or a torn write would,
//! then the worker killed (SIGKILL). The restart checks the checkpoint it resumes from,
//! sets the damaged one aside under `<run>/damaged/<name>/`, says so (the
//! `checkpoint_damaged` event, the alert in the daemon's log) and resumes from the
//! newest intact one; the run finishes. With nothing intact left, it fails naming it.
//!
//! Until the worker writes `manifest.json` itself, the test writes it into each
//! checkpoint from the bytes on disk (`contents::build_from_disk`) before damaging.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lavender::checkpoint::contents::{self, HashAlgorithm};
use lavender_testkit::{Lavenderd, wait_until};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(120);

/// The train step alone on the synthetic tokens: a save every 10 steps, `keep` kept.
fn config(keep: u32) -> String {
    format!(
        r#"steps: [train]
device: cpu
threads: 1
worker:
  command: ["{WORKER}"]
model: {{n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, dropout: 0.0, layer_norm_epsilon: 1.0e-5}}
optimizer: {{warmup_steps: 2}}
training:
  batch_size: 4
  seq_len: 16
  log_every: 1
  eval_every: 1000
  eval_batches: 1
  keep_checkpoints: {keep}
  stages:
    - {{name: pretrain, steps: 120, lr: 3.0e-3, checkpoint_every: 10}}
    - {{name: sft, steps: 4, lr: 1.0e-3, checkpoint_every: 10}}
    - {{name: dpo, steps: 4, lr: 5.0e-4, checkpoint_every: 10, beta: 0.1}}
supervisor:
  listen: 127.0.0.1:0
  poll_interval_ms: 50
  stop_timeout_s: 60
notify:
  desktop: false
"#
    )
}

fn daemon(dir: &Path, keep: u32) -> Lavenderd {
    lavender_testkit::training::write_tokens(&dir.join("data"));
    let mut d = Lavenderd::with_real_worker(dir, &config(keep));
    d.serve();
    d.start(&[]);
    d
}

/// Waits for `n` checkpoints, freezes the worker's group, writes a manifest into
/// each checkpoint, and returns the worker's pid and the checkpoints, oldest first.
fn freeze_with(d: &Lavenderd, n: u64) -> (i32, Vec<PathBuf>) {
    freeze_damaging(d, n, |_| {})
}

/// [`freeze_with`], with `damage` done between hashing the files and writing the
/// manifests: no reader ever sees a manifest beside the intact bytes.
fn freeze_damaging(d: &Lavenderd, n: u64, damage: impl FnOnce(&[PathBuf])) -> (i32, Vec<PathBuf>) {
    d.wait_status(T, &format!("{n} checkpoints"), |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["training"]["checkpoints"].as_u64().unwrap_or(0) >= n
    });
    let pid = d.worker_pid().expect("a worker");
    lavender_testkit::send_signal(-pid, 19); // SIGSTOP: no save completes meanwhile
    let ckpts = lavender_testkit::training::checkpoints(&d.run_dir());
    let manifests: Vec<_> = ckpts
        .iter()
        .map(|c| contents::build_from_disk(c, HashAlgorithm::Blake3).unwrap())
        .collect();
    damage(&ckpts);
    for (c, m) in ckpts.iter().zip(&manifests) {
        contents::write(c, m).unwrap();
    }
    (pid, ckpts)
}

fn kill(pid: i32) {
    lavender_testkit::send_signal(-pid, 9);
    wait_until(T, "the killed worker to be gone", || {
        !lavender_testkit::alive(pid)
    });
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn truncate(file: &Path) {
    let len = std::fs::metadata(file).unwrap().len();
    let f = std::fs::File::options().write(true).open(file).unwrap();
    f.set_len(len / 2).unwrap();
}

/// One byte of the tensor data flipped, the size unchanged: safetensors loads it.
fn flip_last_byte(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(file, bytes).unwrap();
}

fn events(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// After the kill: the run finishes, resumed from `from`; each of `damaged` is under
/// `<run>/damaged/`, named by a `checkpoint_damaged` event and an alert with `what`.
fn resumes_from(d: &Lavenderd, from: &Path, damaged: &[&Path], what: &str) {
    let log = d.daemon_log();
    let show = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut resumed = false;
    d.wait_status(T, "the run to finish", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}\n{}", show());
        resumed |= st["pipeline"]["recovery"]["checkpoint"] == name(from).as_str();
        st["pipeline"]["state"] == "finished"
    });
    let run = d.run_dir();
    let loaded: Vec<String> = events(&run)
        .iter()
        .filter(|e| e["kind"] == "checkpoint_loaded")
        .map(|e| e["path"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        resumed || loaded.iter().any(|p| p.ends_with(&name(from))),
        "not resumed from {}: {loaded:?}\n{}",
        name(from),
        show()
    );
    let said: Vec<Value> = events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "checkpoint_damaged")
        .collect();
    assert_eq!(said.len(), damaged.len(), "{said:?}");
    let daemon_log = show();
    for (dmg, event) in damaged.iter().zip(&said) {
        let n = name(dmg);
        assert!(run.join("damaged").join(&n).is_dir(), "{n} not set aside");
        assert!(!dmg.exists(), "{n} is still where it was");
        eprintln!("checkpoint_damaged: {}", event["message"]);
        assert_eq!(event["checkpoint"], n.as_str(), "{event}");
        assert!(event["reason"].as_str().unwrap().contains(what), "{event}");
        assert!(
            daemon_log.contains(&format!("ALERT step train: checkpoint {n} is damaged")),
            "{daemon_log}"
        );
    }
}

#[test]
fn a_truncated_newest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 4);
    let (pid, ckpts) = freeze_with(&d, 3);
    let [.., before, newest] = &ckpts[..] else {
        panic!("{ckpts:?}")
    };
    truncate(&newest.join("model.safetensors"));
    kill(pid);
    resumes_from(&d, before, &[newest], "the manifest says");
}

#[test]
fn a_flipped_byte_in_the_newest_checkpoint_is_caught_by_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 4);
    let (pid, ckpts) = freeze_with(&d, 3);
    let [.., before, newest] = &ckpts[..] else {
        panic!("{ckpts:?}")
    };
    flip_last_byte(&newest.join("model.safetensors"));
    kill(pid);
    resumes_from(&d, before, &[newest], "model.safetensors: content hash");
}

#[test]
fn a_missing_file_of_the_newest_checkpoint_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 4);
    let (pid, ckpts) = freeze_with(&d, 3);
    let [.., before, newest] = &ckpts[..] else {
        panic!("{ckpts:?}")
    };
    std::fs::remove_file(newest.join("optimizer.safetensors")).unwrap();
    kill(pid);
    resumes_from(&d, before, &[newest], "optimizer.safetensors: missing");
}

/// No manifest: unverified, and loaded as it is.
#[test]
fn a_newest_checkpoint_without_its_manifest_is_unverified_and_resumed_from() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 4);
    let (pid, ckpts) = freeze_with(&d, 3);
    let newest = ckpts.last().unwrap();
    std::fs::remove_file(newest.join(contents::FILE)).unwrap();
    kill(pid);
    resumes_from(&d, newest, &[], "");
    let log = std::fs::read_to_string(d.daemon_log()).unwrap();
    assert!(
        log.contains(&format!(
            "resuming from {}: unverified (no manifest.json",
            newest.display()
        )),
        "{log}"
    );
}

/// No manifest and cut short: the daemon cannot tell, the worker cannot load it
/// and says `damaged_checkpoint` (not `data`); it is set aside the same way.
#[test]
fn an_unverified_checkpoint_the_worker_cannot_load_is_set_aside_too() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 4);
    let (pid, ckpts) = freeze_with(&d, 3);
    let [.., before, newest] = &ckpts[..] else {
        panic!("{ckpts:?}")
    };
    std::fs::remove_file(newest.join(contents::FILE)).unwrap();
    truncate(&newest.join("model.safetensors"));
    kill(pid);
    resumes_from(&d, before, &[newest], "could not load the weights");
    let failed: Vec<Value> = events(&d.run_dir())
        .into_iter()
        .filter(|e| e["kind"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["failure"]["kind"], "damaged_checkpoint");
    let log = std::fs::read_to_string(d.daemon_log()).unwrap();
    assert!(
        !log.contains("the training data is missing or corrupt"),
        "{log}"
    );
}

#[test]
fn the_newest_two_damaged_are_both_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 4);
    let (pid, ckpts) = freeze_with(&d, 3);
    let [.., intact, second, newest] = &ckpts[..] else {
        panic!("{ckpts:?}")
    };
    truncate(&newest.join("model.safetensors"));
    flip_last_byte(&second.join("model.safetensors"));
    kill(pid);
    resumes_from(&d, intact, &[newest, second], "model.safetensors");
}

#[test]
fn a_run_whose_only_checkpoint_is_damaged_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 1);
    let (pid, ckpts) = freeze_with(&d, 1);
    for c in &ckpts {
        truncate(&c.join("model.safetensors"));
    }
    kill(pid);
    let st = d.wait_state("failed", T);
    let error = st["pipeline"]["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("no intact checkpoint is left to resume from"),
        "{st:#}"
    );
    eprintln!("last_error: {error}");
    for c in &ckpts {
        assert!(error.contains(&name(c)), "{st:#}");
        assert!(d.run_dir().join("damaged").join(name(c)).is_dir());
    }
}

/// Each save is read back by the daemon while training goes on: with manifests
/// written into three checkpoints (one then damaged by a flipped byte), the status
/// counts the two that verify and names the newest of them, and `lavenderd
/// checkpoints` shows each as verified, damaged (and what) or unverified.
#[test]
fn the_daemon_reads_each_save_back_and_the_status_and_the_listing_say_what_it_found() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 8);
    let (pid, ckpts) = freeze_damaging(&d, 3, |ckpts| {
        let second = &ckpts[ckpts.len() - 2];
        flip_last_byte(&second.join("model.safetensors"));
    });
    let [.., oldest_intact, damaged, newest] = &ckpts[..] else {
        panic!("{ckpts:?}")
    };
    lavender_testkit::send_signal(-pid, 18); // SIGCONT: the next save asks for a pass
    // A pass under way when the manifests were written may have found the newest
    // without one; the next save's pass reads it again. Later saves carry the
    // worker's own manifests and verify too, so the listing is what is awaited.
    let run = name(&d.run_dir());
    let mut text = String::new();
    let line = |text: &str, c: &Path| {
        text.lines()
            .find(|l| l.starts_with(&name(c)))
            .unwrap_or_default()
            .to_string()
    };
    lavender_testkit::wait_until(T, "the newest of the three verified", || {
        let st = d.status();
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        text = lavender_testkit::stdout(&d.run(&["checkpoints", "--run", &run]));
        line(&text, newest).contains("  verified  ")
    });
    eprintln!("$ lavenderd checkpoints --run {run}\n{text}");
    d.wait_status(T, "two verified checkpoints counted", |st| {
        st["training"]["verified_checkpoints"].as_u64().unwrap_or(0) >= 2
    });
    let line = |c: &Path| line(&text, c);
    assert!(line(oldest_intact).contains("  verified  "), "{text}");
    assert!(line(newest).contains("  verified  "), "{text}");
    // The worker's own manifest was read back before the byte was flipped, so its
    // verdict stands; `lavenderd verify` reads every byte again and names the damage.
    let out = d.run(&["verify", "--run", &run]);
    let report = lavender_testkit::stdout(&out);
    assert!(!out.status.success(), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.contains(&name(damaged)) && l.contains("model.safetensors")),
        "{report}"
    );
    // The worker's final save carries its own manifest: verified once read back.
    d.wait_state("finished", T);
    let out = d.run(&["checkpoints", "--run", &name(&d.run_dir())]);
    let text = lavender_testkit::stdout(&out);
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("final-")
            && (last.contains("  verified  ") || last.contains("  pending  ")),
        "{text}"
    );
}
