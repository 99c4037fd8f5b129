//! Notifications end to end: the real daemon and fake worker, pushing to a JSON
//! webhook on loopback. A crash pushes "crashed" then "restarting"; the run's
//! milestones arrive once and are not resent after the daemon is SIGKILLed and
//! started again; the status carries the channel's counts.

use std::time::Duration;

use lavender_testkit::notify::{Received, Recorder};
use lavender_testkit::{Env, assert_valid, wait_until};

fn kinds(got: &[Received]) -> Vec<String> {
    got.iter()
        .map(|r| r.json()["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

fn milestones(got: &[Received]) -> Vec<String> {
    got.iter()
        .filter(|r| r.json()["level"] == "milestone")
        .map(|r| r.body.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_pushes_and_milestones_once_across_a_daemon_restart() {
    let hook = Recorder::start().await;
    let notify = hook.webhook_yaml("");
    let mut env = Env::new(
        &[
            "--crash-after",
            "4",
            "--crash-times",
            "1",
            "--total-steps",
            "12",
            "--step-ms",
            "5",
            "--checkpoint-every",
            "4",
        ],
        &notify,
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_state("finished", Duration::from_secs(20));
    wait_until(Duration::from_secs(5), "the finished push", || {
        kinds(&hook.received()).contains(&"finished".to_string())
    });
    // The last milestone comes from the follower's next pass over events.jsonl.
    wait_until(
        Duration::from_secs(5),
        "the final-checkpoint milestone",
        || kinds(&hook.received()).contains(&"final_saved".to_string()),
    );
    let got = hook.received();
    let k = kinds(&got);
    let crashed = k
        .iter()
        .position(|x| x == "crashed")
        .expect("a crashed push");
    let restarting = k
        .iter()
        .position(|x| x == "restarting")
        .expect("a restarting push");
    assert!(crashed < restarting, "{k:?}");
    assert!(
        got[crashed].json()["body"].as_str().is_some(),
        "{:?}",
        got[crashed].body
    );
    let before = milestones(&got);
    assert!(!before.is_empty(), "no milestone pushed: {k:?}");
    // Each event line is pushed at most once (the crashed attempt and its restart
    // each wrote their own `run started`, so equal texts are not duplicates).
    let events = std::fs::read_to_string(env.run_dir().join("events.jsonl")).unwrap();
    assert!(
        before.len() <= events.lines().count(),
        "more milestone pushes than events: {before:?}\n{events}"
    );

    // Status: counts per channel, still schema-valid.
    let st = env.status();
    assert_valid(&st);
    assert!(
        st["notifications"]["hook"]["sent"].as_u64().unwrap() >= got.len() as u64 - 1,
        "{st:#}"
    );

    // SIGKILL the daemon, start another: nothing already pushed is pushed again.
    env.kill_daemons();
    let n = hook.received().len();
    env.serve();
    let st = env.status();
    assert_valid(&st);
    // A line the run writes now is pushed by the new daemon's follower, in file
    // order after anything it would push again: once it has arrived, whatever the
    // restart resent has too.
    let marker = lavender::events::Event::new("note", "written after the daemon restart");
    lavender::events::append(&env.run_dir(), &marker).unwrap();
    wait_until(Duration::from_secs(10), "the new line's push", || {
        milestones(&hook.received()[n..])
            .iter()
            .any(|m| m.contains("written after the daemon restart"))
    });
    let after = milestones(&hook.received()[n..]);
    assert_eq!(
        after.len(),
        1,
        "milestones resent after a restart: {after:?}"
    );
}
