//! A real PyTorch Lightning script with `lavender_protocol.lightning.LavenderCallback`
//! under the real `lavenderd`. The example (examples/lightning/) with its config as
//! docs/PYTHON.md shows it (only the port, the poll and the restarts through the
//! environment): start → running with steps → stop saves (Lightning's own SIGTERM
//! handling would have ended the script without a save) and lavenderd names the
//! checkpoint → `start --resume latest` continues from it → SIGKILL the worker past a
//! checkpoint → restart from the run's newest checkpoint, whose replayed steps the
//! replay check passes (data position, RNG, optimizer and schedule all came back) →
//! finished; every status schema-valid (the harness checks each read); the daemon's
//! retention leaves at most keep + best complete checkpoints. Then damaged
//! checkpoints: the newest cut short under its manifest (the daemon's check finds
//! it), and cut short without a manifest (the script cannot load it and says
//! `damaged_checkpoint`): each time the restart resumes from the one before, the
//! damaged one set aside, and the run finishes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lavender_testkit::damage::{self, Frozen, name, truncate};
use lavender_testkit::python::*;
use lavender_testkit::*;

/// examples/lightning/lavender.yaml as written: 300 steps, a save every 50, keep 2.
const MAX_STEPS: u64 = 300;
const KEEP: usize = 2;
const SLOW: Duration = Duration::from_secs(300);
/// Every kill is a restart in a row, and the same one: none of them may give up.
const SUPERVISOR: &str = "  max_restarts: 50\n  max_same_failure: 50\n  restart_backoff_s: [0.2]\n  \
                          startup_grace_s: 300\n  stale_after_s: 120";
/// The Lightning checkpoint in each of the run's checkpoint directories.
const CKPT: &str = "lightning.ckpt";

fn lightning_env() -> Env {
    require_modules(&["torch", "lightning"]);
    Env::example("examples/lightning/lavender.yaml", "train.py")
}

/// A checkpoint's name, from an event's `path`.
fn ckpt_name(event: &serde_json::Value) -> String {
    let path = event["path"].as_str().expect("an event with a path");
    name(Path::new(path))
}

/// The step a checkpoint records.
fn step(ckpt: &Path) -> u64 {
    let state = read_json(&ckpt.join("trainer_state.json"));
    state["step"]
        .as_u64()
        .unwrap_or_else(|| panic!("no step in {}: {state}", ckpt.display()))
}

/// The last step of the run's step record (`log_history.jsonl`, a line a step).
fn recorded_step(run: &Path) -> u64 {
    let text = std::fs::read_to_string(run.join("log_history.jsonl")).unwrap_or_default();
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["step"].as_u64())
        .unwrap_or(0)
}

/// Freezes the worker once its step record is at least 5 steps past its newest
/// checkpoint (thawing it to go on when a save came meanwhile), then kills it: the
/// restart trains those steps again. Returns (the killed pid, the step of the newest
/// checkpoint then).
fn kill_past_a_checkpoint(env: &Env, run: &Path) -> (i32, u64) {
    loop {
        let target = complete(run).last().map_or(0, |c| c.1) + 5;
        wait_until(SLOW, &format!("the step record at step {target}"), || {
            assert!(
                env.worker_pid().is_some(),
                "the worker ended before step {target}\n{}",
                env.worker_log()
            );
            recorded_step(run) >= target
        });
        let worker = env.worker_pid().expect("a worker");
        freeze_group(worker);
        let newest = complete(run).last().map_or(0, |c| c.1);
        if newest > 0 && recorded_step(run) >= newest + 5 {
            send_signal(-worker, 9);
            return (worker, newest);
        }
        send_signal(-worker, 18); // SIGCONT: a save came meanwhile
    }
}

#[test]
fn lightning_stop_resume_kill_replay_finish_with_daemon_retention() {
    let mut env = lightning_env();
    env.serve();

    // 1. start → running with steps; 2. stop → the callback saves on SIGTERM;
    // lavenderd names the checkpoint.
    let (first_run, saved, stop_ckpt) =
        started_then_stopped_saved(&env, "lightning", MAX_STEPS, SLOW);
    let stop_step = step_of(&saved);
    let finals = events(&first_run)
        .into_iter()
        .filter(|e| e["kind"] == "final_saved")
        .count();
    assert_eq!(finals, 1, "one save for the stop");
    let st = env.status();
    assert_eq!(st["training"]["step"].as_u64(), Some(stop_step), "{st:#}");
    assert!(
        first_run.join(&stop_ckpt).join(CKPT).is_file(),
        "{stop_ckpt} holds {CKPT}"
    );

    // 3. start --resume latest → continues from that checkpoint.
    env.start(&["--resume", "latest"]);
    let run = env.run_dir();
    assert_ne!(run, first_run, "one run directory per start");
    let loaded = wait_event(&env, &run, SLOW, "checkpoint_loaded", |e| {
        e["kind"] == "checkpoint_loaded"
    });
    assert_eq!(step_of(&loaded), stop_step);
    assert_eq!(ckpt_name(&loaded), stop_ckpt);
    let after = wait_event(&env, &run, SLOW, "a save after the resume", |e| {
        e["kind"] == "checkpoint_saved" && step_of(e) > stop_step
    });
    say(format!(
        "lightning: resumed from {stop_ckpt} (step {stop_step}); saved {} at step {}",
        ckpt_name(&after),
        step_of(&after)
    ));

    // 4. SIGKILL the worker past a checkpoint → restart from the run's newest; the
    // steps it trains again are the ones the first pass trained.
    let (pid, newest_step) = kill_past_a_checkpoint(&env, &run);
    say(format!(
        "lightning: SIGKILL worker {pid}, 5+ steps past its newest checkpoint (step {newest_step})"
    ));
    let (restarted, resumed_step) = restarted_in(&env, &run, pid, SLOW);
    assert_eq!(resumed_step, newest_step);
    assert_eq!(env.pipeline_json()["restarts"], 1);
    let st = env.wait_replay_verdict(SLOW);
    let replay = &st["training"]["replay"];
    assert_eq!(replay["verdict"], "passed", "{st:#}");
    assert!(replay["steps_checked"].as_u64() >= Some(5), "{st:#}");
    say(format!(
        "lightning: restarted as {restarted}, resumed from step {resumed_step}; replay: {replay}"
    ));

    // 5. → finished.
    assert_finished_with_final_save(&env, &run, MAX_STEPS, SLOW);
    env.assert_no_resume_mismatch();
    say(format!("lightning: finished at step {MAX_STEPS}"));

    // 6. The daemon's retention: at most keep + best complete checkpoints, logged in
    // the daemon's log; nothing of it written into the run.
    let (left, retain_lines) = assert_retention_by_daemon(&env, &run, KEEP, MAX_STEPS);
    say(format!(
        "lightning: retention kept {} complete checkpoint(s) {left:?} (keep {KEEP} + best); daemon log: {}",
        left.len(),
        retain_lines.join(" | ")
    ));
}

/// Freezes the worker once the run has two checkpoints, the newest past step
/// `past`; lets `damage` spoil the newest (it returns what the set-aside's reason
/// says), kills the worker and checks the restart resumed from the one before.
/// Returns the frozen worker and the damaged checkpoint's step.
fn damage_newest(
    env: &Env,
    past: u64,
    case: &str,
    started: Instant,
    damage: impl FnOnce(&Path) -> String,
) -> (Frozen, u64) {
    let frozen = damage::freeze_when(
        env,
        SLOW,
        &format!("2 checkpoints, the newest past step {past}"),
        |c| c.len() >= 2 && c.last().is_some_and(|n| step(n) > past),
    );
    let (before, newest): (PathBuf, PathBuf) = {
        let (b, n) = frozen.newest_two();
        (b.into(), n.into())
    };
    let (from, damaged) = (step(&before), step(&newest));
    let what = damage(&newest);
    frozen.kill();
    damage::assert_resumed(env, &frozen, &before, &[&newest], &what, SLOW);
    say(format!(
        "{case}: resumed from {} (step {from}), set aside {} (step {damaged}) [{:.0} s]",
        name(&before),
        name(&newest),
        started.elapsed().as_secs_f64()
    ));
    (frozen, damaged)
}

#[test]
fn the_lightning_example_resumes_past_a_damaged_checkpoint_and_finishes() {
    let mut env = Env::python(
        &lightning_example(400, 10),
        SUPERVISOR,
        "training:\n  keep_checkpoints: 4",
    );
    env.serve();
    env.start(&[]);
    let started = Instant::now();

    // Cut short under its manifest: the daemon's check finds it before the relaunch.
    let (_, past) = damage_newest(
        &env,
        0,
        &format!("lightning: {CKPT} cut short"),
        started,
        |newest| {
            truncate(&newest.join(CKPT));
            let left = std::fs::metadata(newest.join(CKPT)).unwrap().len();
            format!("{CKPT}: {left} bytes, the manifest says")
        },
    );

    // No manifest: the daemon cannot tell; the script cannot load it, says
    // `damaged_checkpoint`, and it is set aside all the same.
    let (unloadable, _) = damage_newest(
        &env,
        past,
        &format!("lightning: manifest deleted, {CKPT} cut short"),
        started,
        |newest| {
            std::fs::remove_file(newest.join("manifest.json")).unwrap();
            truncate(&newest.join(CKPT));
            "could not load checkpoint".into()
        },
    );
    let failed = damage::one_damaged_failure(&unloadable.run, unloadable.events);
    let message = failed["failure"]["message"].as_str().unwrap_or_default();
    let damaged = unloadable.checkpoints.last().unwrap();
    assert!(message.contains(&name(damaged)), "{message}");

    let run = env.run_dir();
    let st = env.wait_state("finished", SLOW);
    say(format!(
        "lightning: finished at step {} [{:.0} s]",
        st["training"]["step"],
        started.elapsed().as_secs_f64()
    ));
    assert_eq!(st["training"]["step"].as_u64(), Some(400), "{st:#}");
    let set_aside = damage::decisions_of(&env, "checkpoint_set_aside");
    assert_eq!(set_aside.len(), 2, "{set_aside:#?}");
    assert_eq!(run.join("damaged").read_dir().unwrap().count(), 2);
    // What is left (the callback's own manifests) verifies.
    let out = env.run(&["verify", "--run", &name(&run)]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}
