//! A damaged checkpoint under a Python worker costs a restart, not the run: the real
//! `lavenderd`, started as users start it, supervising a `lavender_protocol` script
//! (python/tests/loop_script.py, written the way docs/PYTHON.md shows: `Worker.load`
//! on a resume, `Worker.save`) and the Hugging Face example (examples/hf-trainer/
//! train.py with `LavenderCallback`), each writing its own SHA-256 manifests. In one
//! run each, one damage after another, every time with the worker frozen, its newest
//! checkpoint(s) damaged on disk and the worker killed: cut short; one byte of its
//! weights flipped (size unchanged); a file deleted; the manifest deleted and the
//! weights cut short (the script cannot load it and says `damaged_checkpoint`); the
//! newest two damaged. Each time the restart resumes from the newest intact one and
//! the damaged one is named (`checkpoint_damaged`, `<run>/damaged/`, the alert, the
//! decision log, `lavenderd verify`); the run finishes. A run whose only checkpoint
//! is damaged fails naming it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lavender_testkit::damage::{self, Frozen, flip_last_byte, name, truncate};
use lavender_testkit::python::*;
use lavender_testkit::*;

const T: Duration = Duration::from_secs(300);
/// Every kill is a restart in a row, and the same one: none of them may give up.
const SUPERVISOR: &str = "  max_restarts: 50\n  max_same_failure: 50\n  restart_backoff_s: [0.2]\n  \
                          startup_grace_s: 300\n  stale_after_s: 120";

/// What a worker's checkpoints hold: the file its weights are in, another file it
/// loads, and the step it records.
struct Files {
    weights: &'static str,
    other: &'static str,
}

const PROTOCOL: Files = Files {
    weights: "model.json",
    other: "model.json",
};
const HF: Files = Files {
    weights: "model.safetensors",
    other: "optimizer.pt",
};

/// The lavender_protocol loop: `steps` steps, a save every 25.
fn protocol_env(keep: u32, steps: u64) -> Env {
    let command = vec![
        venv_tool("python"),
        repo()
            .join("python/tests/loop_script.py")
            .display()
            .to_string(),
        "--steps".into(),
        steps.to_string(),
    ];
    Env::python(
        &command,
        SUPERVISOR,
        &format!("training:\n  keep_checkpoints: {keep}"),
    )
}

/// The Hugging Face example at its smallest: `max_steps` steps of batches of 4
/// windows of 32 bytes, a save every 10 steps, no evaluation on the way.
fn hf_env(keep: u32, max_steps: u64) -> Env {
    Env::python(
        &hf_example(max_steps, 10),
        SUPERVISOR,
        &format!("training:\n  keep_checkpoints: {keep}"),
    )
}

/// The step a checkpoint records (`step`, or the Trainer's `global_step`).
fn step(ckpt: &Path) -> u64 {
    let state = read_json(&ckpt.join("trainer_state.json"));
    state["step"]
        .as_u64()
        .or(state["global_step"].as_u64())
        .unwrap_or_else(|| panic!("no step in {}: {state}", ckpt.display()))
}

/// One damage after another in the same run. Each waits for `need` checkpoints,
/// the newest saved past every step damaged so far, so each damage meets new bytes.
struct Sequence<'a> {
    env: &'a Env,
    past: u64,
    started: Instant,
}

impl Sequence<'_> {
    /// Freezes the worker, lets `damage` spoil the checkpoints (it returns the one
    /// to resume from, those to be set aside, newest first, and what their reason
    /// says), kills the worker and checks the restart.
    fn cycle(
        &mut self,
        case: &str,
        need: usize,
        damage: impl FnOnce(&Frozen) -> (PathBuf, Vec<PathBuf>, String),
    ) -> Frozen {
        let past = self.past;
        let frozen = damage::freeze_when(
            self.env,
            T,
            &format!("{need} checkpoints, the newest past step {past}"),
            |c| c.len() >= need && c.last().is_some_and(|n| step(n) > past),
        );
        self.past = step(frozen.checkpoints.last().unwrap());
        let (from, damaged, what) = damage(&frozen);
        let from_step = step(&from);
        frozen.kill();
        let damaged: Vec<&Path> = damaged.iter().map(PathBuf::as_path).collect();
        damage::assert_resumed(self.env, &frozen, &from, &damaged, &what, T);
        say(format!(
            "{case}: resumed from {} (step {from_step}), set aside {:?} [{:.0} s]",
            name(&from),
            damaged.iter().map(|d| name(d)).collect::<Vec<_>>(),
            self.started.elapsed().as_secs_f64()
        ));
        frozen
    }
}

/// The five damages, then the run finishes; each set-aside is in the decision log,
/// and what is left in the run verifies.
fn damages_in_sequence(env: &mut Env, files: &Files, label: &str) {
    env.serve();
    env.start(&[]);
    let mut seq = Sequence {
        env,
        past: 0,
        started: Instant::now(),
    };
    let w = files.weights;
    seq.cycle(&format!("{label}: {w} cut short"), 2, |f| {
        let (before, newest) = f.newest_two();
        truncate(&newest.join(w));
        let left = std::fs::metadata(newest.join(w)).unwrap().len();
        (
            before.into(),
            vec![newest.into()],
            format!("{w}: {left} bytes, the manifest says"),
        )
    });
    seq.cycle(&format!("{label}: a byte of {w} flipped"), 2, |f| {
        let (before, newest) = f.newest_two();
        let size = std::fs::metadata(newest.join(w)).unwrap().len();
        flip_last_byte(&newest.join(w));
        assert_eq!(std::fs::metadata(newest.join(w)).unwrap().len(), size);
        (
            before.into(),
            vec![newest.into()],
            format!("{w}: content hash"),
        )
    });
    let other = files.other;
    seq.cycle(&format!("{label}: {other} deleted"), 2, |f| {
        let (before, newest) = f.newest_two();
        std::fs::remove_file(newest.join(other)).unwrap();
        (
            before.into(),
            vec![newest.into()],
            format!("{other}: missing"),
        )
    });
    // No manifest: the daemon cannot tell; the script cannot load it, says
    // `damaged_checkpoint`, and it is set aside all the same.
    let unloadable = seq.cycle(
        &format!("{label}: manifest deleted, {w} cut short"),
        2,
        |f| {
            let (before, newest) = f.newest_two();
            std::fs::remove_file(newest.join("manifest.json")).unwrap();
            truncate(&newest.join(w));
            (
                before.into(),
                vec![newest.into()],
                "could not load checkpoint".into(),
            )
        },
    );
    damage::one_damaged_failure(&unloadable.run, unloadable.events);
    let (second, newest) = {
        let f = seq.cycle(&format!("{label}: the newest two damaged"), 3, |f| {
            let [.., intact, second, newest] = &f.checkpoints[..] else {
                panic!("{:?}", f.checkpoints)
            };
            truncate(&newest.join(w));
            flip_last_byte(&second.join(w));
            (
                intact.into(),
                vec![newest.into(), second.into()],
                w.to_string(),
            )
        });
        let [.., second, newest] = &f.checkpoints[..] else {
            unreachable!()
        };
        (second.clone(), newest.clone())
    };
    let run = env.run_dir();
    let st = env.wait_state("finished", T);
    say(format!(
        "{label}: finished at step {} [{:.0} s]",
        st["training"]["step"],
        seq.started.elapsed().as_secs_f64()
    ));
    let set_aside = damage::decisions_of(env, "checkpoint_set_aside");
    assert_eq!(set_aside.len(), 6, "{set_aside:#?}");
    for (d, c) in set_aside[4..].iter().zip([&newest, &second]) {
        let did = d["did"].as_str().unwrap();
        assert!(
            did.starts_with(&format!("set {} aside as ", name(c))),
            "{d:#}"
        );
    }
    assert_eq!(run.join("damaged").read_dir().unwrap().count(), 6);
    // What lies under damaged/ is no checkpoint of the run any more: what is left
    // (the worker's own manifests) verifies.
    let out = env.run(&["verify", "--run", &name(&run)]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn a_protocol_worker_resumes_past_each_damaged_checkpoint_and_finishes() {
    let mut env = protocol_env(4, 400);
    damages_in_sequence(&mut env, &PROTOCOL, "lavender_protocol");
}

#[test]
fn the_hf_example_resumes_past_each_damaged_checkpoint_and_finishes() {
    let mut env = hf_env(4, 200);
    damages_in_sequence(&mut env, &HF, "hf-trainer");
}

/// `lavenderd verify` on the run while its newest checkpoint is damaged, before the
/// daemon sets it aside: it names the checkpoint, the file and the damage.
fn verify_names(env: &Env, frozen: &Frozen, damaged: &Path, file: &str) {
    let out = env.run(&["verify", "--run", &name(&frozen.run)]);
    let report = stdout(&out);
    assert!(!out.status.success(), "{report}");
    assert!(
        report.lines().any(|l| l.contains(&name(damaged))) && report.contains(file),
        "{report}"
    );
    say(format!(
        "$ lavenderd verify --run {}\n{report}",
        name(&frozen.run)
    ));
}

fn only_checkpoint_damaged(mut env: Env, file: &str) {
    env.serve();
    env.start(&[]);
    let frozen = damage::freeze_at(&env, 1, T);
    let only = frozen.checkpoints.clone();
    for c in &only {
        truncate(&c.join(file));
    }
    verify_names(&env, &frozen, &only[0], file);
    frozen.kill();
    damage::assert_fails_naming(&env, &frozen.run, &only, T);
}

#[test]
fn a_protocol_run_whose_only_checkpoint_is_damaged_fails_naming_it() {
    only_checkpoint_damaged(protocol_env(1, 100_000), PROTOCOL.weights);
}

#[test]
fn an_hf_run_whose_only_checkpoint_is_damaged_fails_naming_it() {
    only_checkpoint_damaged(hf_env(1, 100_000), HF.weights);
}

/// A read error is not damage under a Python worker either: its checkpoints on a
/// real file system that fails (`lavender_testkit::failfs`), every file of the
/// weights unreadable (EIO) while the worker is killed. The relaunch waits for the
/// storage (the script, spared the check by its checkpoint's recorded verdict, says
/// `damaged_checkpoint` when it cannot read it; the next check reads every byte and
/// meets the error): one `storage_error` alert naming the file, nothing set aside,
/// and once the files read again the run resumes from its newest checkpoint.
#[test]
fn a_protocol_worker_waits_out_eio_on_its_checkpoints_and_nothing_is_set_aside() {
    let mut env = protocol_env(4, 100_000);
    let fs = lavender_testkit::failfs::FailingFs::mount(
        &env.dir.path().join("backing"),
        &env.data_root.join("checkpoints"),
    );
    env.serve();
    env.start(&[]);
    let frozen = damage::freeze_at(&env, 2, T);
    let newest = frozen.checkpoints.last().unwrap().clone();
    // Read back and verified first: the relaunch's check takes that verdict and the
    // worker meets the error.
    damage::wait_verified(&frozen, &newest, T);
    fs.fail(&format!("*{}", PROTOCOL.weights));
    frozen.kill();
    damage::assert_storage_wait(&env, PROTOCOL.weights, T);
    fs.heal();
    damage::assert_resumed(&env, &frozen, &newest, &[], "", T);
    assert!(
        !frozen.run.join("damaged").exists(),
        "something was set aside"
    );
    // The daemon and its worker go before the file system under them.
    drop(env);
    drop(fs);
}
