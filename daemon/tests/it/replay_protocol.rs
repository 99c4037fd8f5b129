//! The replay check under a `lavender_protocol` script (python/tests/schedule_script.py,
//! a loop whose learning-rate warm-up is kept in its checkpoint): the first worker
//! hangs after step 30 and is killed; the restart from the checkpoint at 25 trains
//! steps 26 to 30 again. Resumed whole, they agree (the protocol's step record is
//! the first pass's); a script that forgets its schedule's position gives another
//! learning rate at step 26, and the daemon names it. The same with the Hugging Face
//! example (examples/hf-trainer/train.py), whose record holds the Trainer's mean loss
//! over each logging window: resumed whole its replayed windows agree within the
//! tolerance; with `--ignore-data-skip` (the Trainer starts the epoch's data over on
//! a resume) the first replayed window differs.

use std::time::Duration;

use lavender_testkit::python::*;
use lavender_testkit::*;
use serde_json::Value;

const T: Duration = Duration::from_secs(120);

fn env(forget: bool) -> Env {
    schedule_env(forget, &["--hang-after", "30"])
}

/// The schedule script for 60 steps (a save every 25), with `more` arguments.
fn schedule_env(forget: bool, more: &[&str]) -> Env {
    let mut command = vec![
        venv_tool("python"),
        repo()
            .join("python/tests/schedule_script.py")
            .display()
            .to_string(),
        "--steps".into(),
        "60".into(),
    ];
    command.extend(more.iter().map(|s| s.to_string()));
    if forget {
        command.push("--forget-schedule".into());
    }
    let mut env = Env::python(&command, "  restart_backoff_s: [0]", "");
    env.serve();
    env.start(&[]);
    env
}

/// Kills the first worker, hung after step 30; the status once the check is done.
fn killed_at_30_and_replayed(env: &Env) -> Value {
    env.wait_status(T, "the first worker at step 30", |st| {
        st["training"]["step"].as_u64() == Some(30)
    });
    let worker = env.worker_pid().unwrap();
    send_signal(-worker, 9);
    env.wait_replay_verdict(T)
}

#[test]
fn a_protocol_script_resumed_whole_replays_its_steps_as_they_were() {
    let env = env(false);
    let st = killed_at_30_and_replayed(&env);
    let replay = &st["training"]["replay"];
    assert_eq!(replay["verdict"], "passed", "{st:#}");
    assert_eq!(replay["steps_checked"], 5, "{st:#}");
    assert_eq!(replay["largest_difference"], 0.0, "{st:#}");
    // `auto` for a script: a relative tolerance.
    assert_eq!(replay["tolerance"], "relative 0.02", "{st:#}");
    env.wait_state("finished", T);
}

#[test]
fn a_protocol_script_that_forgets_its_schedule_is_a_resume_mismatch_naming_the_step() {
    let env = env(true);
    let st = killed_at_30_and_replayed(&env);
    let replay = &st["training"]["replay"];
    assert_eq!(replay["verdict"], "mismatch", "{st:#}");
    // 0.1 × 26/100 against 0.1 × 1/100: the warm-up started over.
    let said = replay["mismatch"].as_str().unwrap();
    assert!(said.starts_with("step 26 learning_rate 0.026"), "{st:#}");
    assert!(said.ends_with(" vs 0.001"), "{st:#}");
    let log = env.log_with("ALERT step train: the run resumed from", T);
    assert!(log.contains("step 26 learning_rate"), "{log}");
    env.wait_state("finished", T);
}

/// The Hugging Face example: 300 steps of batches of 4 windows of 32 bytes, a save
/// every 100, a log every 5, no evaluation on the way.
fn hf_env(ignore_data_skip: bool) -> Env {
    let mut command = hf_example(300, 100);
    if ignore_data_skip {
        command.push("--ignore-data-skip".into());
    }
    let mut env = Env::python(
        &command,
        "  restart_backoff_s: [0]\n  startup_grace_s: 300",
        "",
    );
    env.serve();
    env.start(&[]);
    env
}

/// Freezes the worker once it is at least two logging windows past its newest
/// checkpoint (thawing it to go on when it is not), then kills it; the status once
/// the restart's check is done.
fn hf_killed_past_a_checkpoint_and_replayed(env: &Env) -> Value {
    let mut at_least = 110;
    loop {
        env.wait_status(T, &format!("the worker past step {at_least}"), |st| {
            assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
            st["training"]["step"].as_u64() >= Some(at_least)
                && st["training"]["checkpoints"].as_u64() >= Some(1)
        });
        let worker = env.worker_pid().unwrap();
        send_signal(-worker, 19); // SIGSTOP to the group
        let run = env.run_dir();
        let step = lavender::heartbeat::read(&lavender::heartbeat::path(&run))
            .unwrap()
            .step;
        let newest = lavender::checkpoint::latest_complete(&run)
            .unwrap()
            .and_then(|c| lavender::trainer_state::read(&c.path).ok())
            .map_or(0, |s| s.step);
        if step >= newest + 10 {
            send_signal(-worker, 9);
            break;
        }
        send_signal(-worker, 18); // SIGCONT: too close to its checkpoint
        at_least = newest + 10;
    }
    env.wait_replay_verdict(T)
}

#[test]
fn the_hf_example_resumed_whole_replays_its_logged_windows_within_the_tolerance() {
    let env = hf_env(false);
    let st = hf_killed_past_a_checkpoint_and_replayed(&env);
    let replay = &st["training"]["replay"];
    assert_eq!(replay["verdict"], "passed", "{st:#}");
    assert!(replay["steps_checked"].as_u64() >= Some(2), "{st:#}");
    say(format!("HF example resumed whole: {replay}"));
    env.wait_state("finished", T);
}

#[test]
fn the_hf_example_that_starts_its_epoch_over_on_a_resume_is_a_resume_mismatch() {
    let env = hf_env(true);
    let st = hf_killed_past_a_checkpoint_and_replayed(&env);
    let replay = &st["training"]["replay"];
    assert_eq!(replay["verdict"], "mismatch", "{st:#}");
    say(format!("HF example with ignore_data_skip: {replay}"));
    // The first replayed window: its batches are the epoch's first ones again.
    let said = replay["mismatch"].as_str().unwrap();
    let newest = replay["checkpoint"].as_str().unwrap();
    let step: u64 = newest.rsplit('-').next().unwrap().parse().unwrap();
    assert!(said.starts_with(&format!("step {} ", step + 5)), "{said}");
}

/// A drill of a protocol script's finished run: resumed in a sandbox from the
/// checkpoint at 25, step 26 is what the run trained; a script that forgets its
/// schedule on a resume fails the drill, naming the step and the learning rates.
fn protocol_drill(forget: bool) -> (std::process::Output, String) {
    let mut env = schedule_env(forget, &[]);
    env.wait_state("finished", T);
    env.wait_status(T, "every checkpoint verified", |st| {
        st["training"]["verified_checkpoints"].as_u64() >= Some(3)
    });
    env.terminate_daemons();
    let first = lavender::checkpoint::list_run_checkpoints(&env.run_dir()).unwrap()[0].clone();
    assert_eq!(first.state.step, 25);
    drilled(&env, &first.name)
}

/// `lavenderd drill --checkpoint NAME`: its exit and what it said.
fn drilled(env: &Env, name: &str) -> (std::process::Output, String) {
    let out = env.run(&["drill", "--checkpoint", name]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    say(format!("$ lavenderd drill --checkpoint {name}\n{said}"));
    (out, said)
}

#[test]
fn a_drill_of_a_protocol_run_passes() {
    let (out, said) = protocol_drill(false);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("drill passed: 1 step(s)"), "{said}");
}

#[test]
fn a_drill_of_a_protocol_run_whose_resume_forgets_its_schedule_fails() {
    let (out, said) = protocol_drill(true);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("step 26 learning_rate 0.026"), "{said}");
    assert!(said.contains(" vs 0.001 (relative 0.02)"), "{said}");
}

/// A drill of the Hugging Face example's finished run: resumed from checkpoint-100
/// in a sandbox, it trains up to the next logged step (a window of 5) and agrees
/// within the tolerance; with `--ignore-data-skip` that window trains the epoch's
/// first batches again, and the drill fails.
fn hf_drill(ignore_data_skip: bool) -> (std::process::Output, String) {
    let mut env = hf_env(ignore_data_skip);
    env.wait_state("finished", T);
    env.wait_status(T, "every checkpoint verified", |st| {
        st["training"]["verified_checkpoints"].as_u64() >= Some(3)
    });
    env.terminate_daemons();
    let (out, said) = drilled(&env, "checkpoint-100");
    assert!(said.contains("for 5 step(s)"), "{said}");
    (out, said)
}

#[test]
fn a_drill_of_the_hf_example_passes() {
    let (out, said) = hf_drill(false);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("drill passed: 1 step(s)"), "{said}");
}

#[test]
fn a_drill_of_the_hf_example_that_starts_its_epoch_over_fails() {
    let (out, said) = hf_drill(true);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("step 105 "), "{said}");
}
