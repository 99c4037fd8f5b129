//! A damaged checkpoint costs minutes, not the run: the real `lavenderd` supervising
//! the real `lavender-worker`, the worker frozen (SIGSTOP, so no save is in flight),
//! its newest checkpoint(s) damaged on disk as a disk error or a torn write would,
//! then the worker killed (SIGKILL). The restart checks the checkpoint it resumes from,
//! sets the damaged one aside under `<run>/damaged/<name>/`, says so (the
//! `checkpoint_damaged` event, the alert in the daemon's log) and resumes from the
//! newest intact one; the run finishes. With nothing intact left, it fails naming it.
//!
//! The checkpoints carry the worker's own `manifest.json`; the freezing, damaging
//! and reading back are the testkit's (`lavender_testkit::damage`), shared with the
//! Python workers' tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lavender::checkpoint::contents::{self, HashAlgorithm};
use lavender_testkit::Lavenderd;
use lavender_testkit::damage::{self, Frozen, flip_last_byte, name, truncate};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(120);

/// The train step alone on the synthetic tokens: a save every 10 steps, `keep` kept.
fn config(keep: u32) -> String {
    lavender_testkit::training::TrainOnly {
        worker: WORKER,
        model: lavender_testkit::training::SMALL_MODEL,
        keep_checkpoints: keep,
        stages: "    - {name: pretrain, steps: 120, lr: 3.0e-3, checkpoint_every: 10}
    - {name: sft, steps: 4, lr: 1.0e-3, checkpoint_every: 10}
    - {name: dpo, steps: 4, lr: 5.0e-4, checkpoint_every: 10, beta: 0.1}",
        supervisor: "",
        notify: "",
        extra: "",
    }
    .yaml()
}

fn daemon(dir: &Path, keep: u32) -> Lavenderd {
    lavender_testkit::training::write_tokens(&dir.join("data"));
    let mut d = Lavenderd::with_real_worker(dir, &config(keep));
    d.serve();
    d.start(&[]);
    d
}

/// Waits for `n` checkpoints (each with the worker's own manifest) and freezes the
/// worker's group.
fn freeze_with(d: &Lavenderd, n: usize) -> Frozen {
    damage::freeze_at(d, n, T)
}

/// [`freeze_with`], the manifests then written again from the bytes on disk with
/// `damage` done in between: no reader ever sees the new manifest beside the
/// intact bytes.
fn freeze_damaging(d: &Lavenderd, n: usize, damage: impl FnOnce(&[PathBuf])) -> Frozen {
    let frozen = freeze_with(d, n);
    let manifests: Vec<_> = frozen
        .checkpoints
        .iter()
        .map(|c| contents::build_from_disk(c, HashAlgorithm::Blake3).unwrap())
        .collect();
    damage(&frozen.checkpoints);
    for (c, m) in frozen.checkpoints.iter().zip(&manifests) {
        contents::write(c, m).unwrap();
    }
    frozen
}

/// After the kill: the worker resumed from `from`, each of `damaged` set aside and
/// named (`damage::assert_resumed`), and the run finishes.
fn resumes_from(d: &Lavenderd, frozen: &Frozen, from: &Path, damaged: &[&Path], what: &str) {
    damage::assert_resumed(d, frozen, from, damaged, what, T);
    d.wait_status(T, "the run to finish", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["pipeline"]["state"] == "finished"
    });
}

/// Three checkpoints, the newest spoilt by `damage`, the worker killed: the run
/// resumes from the one before, names the newest with `what`, and finishes.
fn newest_damaged(
    damage: impl FnOnce(&Path),
    what: &str,
) -> (tempfile::TempDir, Lavenderd, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 4);
    let frozen = freeze_with(&d, 3);
    let (before, newest) = frozen.newest_two();
    damage(newest);
    frozen.kill();
    resumes_from(&d, &frozen, before, &[newest], what);
    (dir, d, newest.to_path_buf())
}

#[test]
fn a_truncated_newest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before() {
    let (_dir, d, newest) = newest_damaged(
        |c| truncate(&c.join("model.safetensors")),
        "the manifest says",
    );
    // The set-aside is a decision of the daemon's own, in its decision log.
    let set_aside = damage::decisions_of(&d, "checkpoint_set_aside");
    assert_eq!(set_aside.len(), 1, "{set_aside:#?}");
    assert!(
        set_aside[0]["did"]
            .as_str()
            .unwrap()
            .starts_with(&format!("set {} aside as ", name(&newest))),
        "{set_aside:#?}"
    );
    let out = d.run(&["incidents"]);
    let text = lavender_testkit::stdout(&out);
    assert!(text.contains("checkpoint set aside"), "{text}");
    eprintln!("$ lavenderd incidents\n{text}");
}

#[test]
fn a_flipped_byte_in_the_newest_checkpoint_is_caught_by_its_hash() {
    newest_damaged(
        |c| flip_last_byte(&c.join("model.safetensors")),
        "model.safetensors: content hash",
    );
}

#[test]
fn a_missing_file_of_the_newest_checkpoint_is_named() {
    newest_damaged(
        |c| std::fs::remove_file(c.join("optimizer.safetensors")).unwrap(),
        "optimizer.safetensors: missing",
    );
}

/// No manifest: unverified, and loaded as it is.
#[test]
fn a_newest_checkpoint_without_its_manifest_is_unverified_and_resumed_from() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 4);
    let frozen = freeze_with(&d, 3);
    let (_, newest) = frozen.newest_two();
    std::fs::remove_file(newest.join(contents::FILE)).unwrap();
    frozen.kill();
    resumes_from(&d, &frozen, newest, &[], "");
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
    let frozen = freeze_with(&d, 3);
    let (before, newest) = frozen.newest_two();
    std::fs::remove_file(newest.join(contents::FILE)).unwrap();
    truncate(&newest.join("model.safetensors"));
    frozen.kill();
    resumes_from(&d, &frozen, before, &[newest], "could not load the weights");
    let failed: Vec<Value> = lavender_testkit::events(&d.run_dir())
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
    let frozen = freeze_with(&d, 3);
    let [.., intact, second, newest] = &frozen.checkpoints[..] else {
        panic!("{:?}", frozen.checkpoints)
    };
    truncate(&newest.join("model.safetensors"));
    flip_last_byte(&second.join("model.safetensors"));
    frozen.kill();
    resumes_from(&d, &frozen, intact, &[newest, second], "model.safetensors");
}

#[test]
fn a_run_whose_only_checkpoint_is_damaged_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), 1);
    let frozen = freeze_with(&d, 1);
    for c in &frozen.checkpoints {
        truncate(&c.join("model.safetensors"));
    }
    frozen.kill();
    damage::assert_fails_naming(&d, &frozen.run, &frozen.checkpoints, T);
}

/// Each save is read back by the daemon while training goes on: with manifests
/// written into three checkpoints (one then damaged by a flipped byte), the status
/// counts the two that verify and names the newest of them, and `lavenderd
/// checkpoints` shows each as verified, damaged (and what) or unverified.
#[test]
fn the_daemon_reads_each_save_back_and_the_status_and_the_listing_say_what_it_found() {
    let dir = tempfile::tempdir().unwrap();
    // More kept than the run saves (15): retention never takes the damaged one before
    // `verify` reads it, however far the thawed worker trains meanwhile.
    let d = daemon(dir.path(), 20);
    let frozen = freeze_damaging(&d, 3, |ckpts| {
        let second = &ckpts[ckpts.len() - 2];
        flip_last_byte(&second.join("model.safetensors"));
    });
    let [.., oldest_intact, damaged, newest] = &frozen.checkpoints[..] else {
        panic!("{:?}", frozen.checkpoints)
    };
    frozen.thaw(); // the next save asks for a pass
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
    // The manifests written again changed the files the first verdicts were of: the
    // listing shows those as pending until the next pass, newest first, reads them.
    lavender_testkit::wait_until(T, "the newest and the oldest intact verified", || {
        let st = d.status();
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        text = lavender_testkit::stdout(&d.run(&["checkpoints", "--run", &run]));
        line(&text, newest).contains("  verified  ")
            && line(&text, oldest_intact).contains("  verified  ")
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
    let run = name(&d.run_dir());
    lavender_testkit::wait_until(T, "the final save verified", || {
        let text = lavender_testkit::stdout(&d.run(&["checkpoints", "--run", &run]));
        text.lines()
            .last()
            .is_some_and(|l| l.starts_with("final-") && l.contains("  verified  "))
    });
}

/// `keep_checkpoints: 1`: newer checkpoints that never verify (damaged before the
/// daemon read them back, the daemon frozen meanwhile so none is read early) do not
/// cost the older verified one. It stays until a newer one has verified; the run
/// goes on and finishes, never without a verified checkpoint on disk.
#[test]
fn with_keep_one_a_newer_checkpoint_that_never_verifies_does_not_cost_the_verified_one() {
    use lavender::checkpoint::contents::Verdict;
    use lavender::checkpoint::verdicts::{self, Check};
    use lavender_testkit::training::checkpoints;
    let (sigstop, sigcont) = (19, 18);
    let dir = tempfile::tempdir().unwrap();
    lavender_testkit::training::write_tokens(&dir.path().join("data"));
    let mut d = Lavenderd::with_real_worker(dir.path(), &config(1));
    // The worker stays frozen while the daemon reads its saves back: no hang kill
    // meanwhile (the worker's heartbeat interval is milliseconds).
    d.env
        .push(("LAVENDER__SUPERVISOR__STALE_AFTER_S".into(), "600".into()));
    let daemon_pid = d.serve() as i32;
    d.start(&[]);
    d.wait_status(T, "a verified checkpoint", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["training"]["verified_checkpoints"].as_u64().unwrap_or(0) >= 1
    });
    // The daemon frozen: its verifier and its retention with it.
    lavender_testkit::send_signal(daemon_pid, sigstop);
    let run = d.run_dir();
    let before = checkpoints(&run);
    let intact = before.last().unwrap().clone();
    // A save is said (`checkpoint_saved`) after its rename: only a said one is read
    // back before the worker goes on.
    // Only saves said after the freeze: an earlier one may be gone already (keep 1,
    // a newer one verified before the freeze).
    let saved = || -> Vec<String> {
        lavender_testkit::events(&run)
            .iter()
            .filter(|e| e["kind"] == "checkpoint_saved")
            .filter_map(|e| e["path"].as_str().map(|p| name(Path::new(p))))
            .collect()
    };
    let already = saved().len();
    let said = || -> Vec<String> {
        saved()
            .into_iter()
            .skip(already)
            .filter(|n| !before.iter().any(|c| name(c) == *n))
            .collect()
    };
    lavender_testkit::wait_until(T, "a save while the daemon is frozen", || {
        !said().is_empty()
    });
    let pid = d.worker_pid().expect("a worker");
    lavender_testkit::send_signal(-pid, sigstop);
    let said = said();
    let newer: Vec<PathBuf> = checkpoints(&run)
        .into_iter()
        .filter(|c| said.contains(&name(c)))
        .collect();
    assert!(!newer.is_empty(), "{said:?}");
    for c in &newer {
        flip_last_byte(&c.join("model.safetensors"));
    }
    lavender_testkit::send_signal(daemon_pid, sigcont);
    let verdict = |c: &Path| verdicts::read(&run, &name(c));
    lavender_testkit::wait_until(T, "the newer ones read back, damaged", || {
        newer
            .iter()
            .all(|c| matches!(verdict(c), Check::Done(Verdict::Damaged { .. })))
    });
    // Retention ran on their saves (as the verifier did): the verified one stayed.
    let st = d.wait_status(T, "the intact one verified", |st| {
        assert!(
            intact.is_dir(),
            "{} was deleted while no newer checkpoint verified",
            name(&intact)
        );
        st["training"]["latest_verified_checkpoint"] == name(&intact).as_str()
    });
    assert!(intact.is_dir(), "{st:#}");
    eprintln!(
        "kept {} (verified) beside {:?} (damaged)",
        name(&intact),
        newer.iter().map(|c| name(c)).collect::<Vec<_>>()
    );
    // Once a newer save verifies, the older ones may go; never before.
    lavender_testkit::send_signal(-pid, sigcont);
    d.wait_status(T, "the run to finish", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        if !intact.is_dir() {
            let all = checkpoints(&run);
            let verified_since = all.iter().any(|c| {
                !before.contains(c)
                    && !newer.contains(c)
                    && matches!(verdict(c), Check::Done(Verdict::Verified { .. }))
            });
            assert!(
                verified_since,
                "{} went before a newer one verified: {all:?}",
                name(&intact)
            );
        }
        st["pipeline"]["state"] == "finished"
    });
}
