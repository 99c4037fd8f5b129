//! The daemon's own alerts, end to end: the real daemon and fake worker pushing
//! to a JSON webhook on loopback. A crash restart whose worker trains again is
//! "recovered"; crashes the daemon retries are pushed once per incident, and its
//! end once; a heartbeat that stops advancing is "stalled" (short injected
//! stale_after_s and start-up grace, `on_stall: alert`), and a restart after it is "recovered" too; free space under the
//! configured floor is "disk low". `status --json` prints the push counts that
//! `GET /status` serves.

use std::time::Duration;

use lavender_testkit::notify::Recorder;
use lavender_testkit::*;

const T: Duration = Duration::from_secs(15);

fn position(kinds: &[String], kind: &str) -> usize {
    kinds
        .iter()
        .position(|k| k == kind)
        .unwrap_or_else(|| panic!("no {kind} push in {kinds:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_restart_whose_heartbeat_resumes_is_recovered() {
    let hook = Recorder::start().await;
    let mut env = Env::new(
        &[
            "--crash-after",
            "4",
            "--crash-times",
            "1",
            "--total-steps",
            "30",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "4",
        ],
        &hook.webhook_yaml(""),
        "[train]",
    );
    env.serve();
    env.start(&[]);
    wait_until(T, "the recovered push", || {
        hook.kinds().contains(&"recovered".to_string())
    });
    let kinds = hook.kinds();
    let (crashed, restarting, recovered) = (
        position(&kinds, "crashed"),
        position(&kinds, "restarting"),
        position(&kinds, "recovered"),
    );
    assert!(crashed < restarting && restarting < recovered, "{kinds:?}");
    // The end of the incident: the restarted worker trained past its checkpoint.
    let push = &hook.of_kind("recovered")[0];
    let title = push["title"].as_str().unwrap();
    assert!(
        title.starts_with("[lavender] recovered at step "),
        "{title}"
    );
    assert_eq!(push["level"], "alert");
    // It came from the restarted worker: running, one restart, past the crash point.
    let st = env.status();
    assert_eq!(st["pipeline"]["restarts"], 1, "{st:#}");
    env.wait_state("finished", T);
    assert_eq!(hook.of_kind("recovered").len(), 1, "{:?}", hook.kinds());
    assert_eq!(hook.of_kind("stalled").len(), 0, "{:?}", hook.kinds());
}

/// Two crashes at step 4 (no checkpoint yet: each restart trains from the start and
/// fails at the same place; a third time would fail the pipeline), each restarted
/// by the daemon, then a worker that trains past step 4: one "crashed" push
/// for the incident (not two), and one "recovered" push
/// when it is over, saying at which step, after how long and about how much work
/// was lost; the log still says each crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_the_daemon_retries_are_pushed_once_and_their_end_once() {
    let hook = Recorder::start().await;
    let mut env = Env::new(
        &[
            "--crash-after",
            "4",
            "--crash-times",
            "2",
            "--total-steps",
            "40",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "1000",
        ],
        &format!("  restart_backoff_s: [0.1]\n{}", hook.webhook_yaml("")),
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_status(Duration::from_secs(30), "finished", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["pipeline"]["state"] == "finished"
    });
    wait_until(T, "the finished push", || {
        hook.kinds().contains(&"finished".to_string())
    });
    let kinds = hook.kinds();
    assert_eq!(hook.of_kind("crashed").len(), 1, "{kinds:?}");
    assert_eq!(hook.of_kind("restarting").len(), 1, "{kinds:?}");
    let recovered = hook.of_kind("recovered");
    assert_eq!(recovered.len(), 1, "{kinds:?}");
    assert!(
        position(&kinds, "crashed") < position(&kinds, "recovered")
            && position(&kinds, "recovered") < position(&kinds, "finished"),
        "{kinds:?}"
    );
    let title = recovered[0]["title"].as_str().unwrap();
    assert!(
        title.starts_with("[lavender] recovered at step ") && title.contains(" after "),
        "{title}"
    );
    let body = recovered[0]["body"].as_str().unwrap();
    assert!(
        body.starts_with("about ") && body.contains("of work lost; 2 decision(s)"),
        "{body}"
    );
    let log = env.log_with("pipeline finished after", T);
    assert_eq!(log.matches("ALERT step train crashed").count(), 2, "{log}");
    assert_eq!(env.status()["pipeline"]["restarts"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_that_stops_advancing_is_stalled_and_a_restart_recovers() {
    let hook = Recorder::start().await;
    let mut env = Env::new(
        &[
            "--hang-after",
            "3",
            "--hang-times",
            "1",
            "--step-ms",
            "10",
            "--total-steps",
            "1000",
        ],
        &format!(
            "  stale_after_s: 1\n  startup_grace_s: 1\n  on_stall: alert\n{}",
            hook.webhook_yaml("")
        ),
        "[train]",
    );
    env.serve();
    env.start(&[]);
    wait_until(T, "the stalled push", || {
        hook.kinds().contains(&"stalled".to_string())
    });
    let stalled = &hook.of_kind("stalled")[0];
    let title = stalled["title"].as_str().unwrap();
    assert!(
        title.starts_with("[lavender] stalled: no heartbeat for "),
        "{title}"
    );
    assert_eq!(
        stalled["body"],
        "the worker's heartbeat is older than 1 s; last step 3"
    );
    let st = env.status();
    assert_eq!(st["training"]["heartbeat_stale"], true, "{st:#}");
    assert_eq!(st["pipeline"]["running"], true, "{st:#}");
    assert_eq!(hook.of_kind("recovered").len(), 0, "no recovery while hung");

    // The hung worker dies (as if killed by the OOM killer); its restart writes
    // heartbeats again.
    let worker = env.worker_pid().unwrap();
    send_signal(worker, 9);
    wait_until(T, "the recovered push", || {
        hook.kinds().contains(&"recovered".to_string())
    });
    let kinds = hook.kinds();
    assert!(
        position(&kinds, "stalled") < position(&kinds, "crashed")
            && position(&kinds, "restarting") < position(&kinds, "recovered"),
        "{kinds:?}"
    );
    // The crash that followed the stall opened an incident the restart closed.
    let recovered = &hook.of_kind("recovered")[0];
    let body = recovered["body"].as_str().unwrap();
    assert!(
        body.starts_with("about ") && body.contains("of work lost"),
        "{body}"
    );
    assert_ne!(env.worker_pid(), Some(worker));
}

/// `on_stall: restart`: the hung worker's restart is pushed ("hung", saying at which
/// step and from which checkpoint), then "recovered"; a run the next daemon resumes
/// after a service restart is pushed as "resumed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_restarted_and_a_resumed_run_are_pushed() {
    let hook = Recorder::start().await;
    let mut env = Env::new(
        &[
            "--hang-after",
            "5",
            "--hang-times",
            "1",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "5",
            "--total-steps",
            "400",
        ],
        &format!(
            "  stale_after_s: 1\n  stall_kill_grace_s: 0.5\n{}",
            hook.webhook_yaml("")
        ),
        "[train]",
    );
    env.serve();
    env.start(&[]);
    wait_until(T, "the hung and recovered pushes", || {
        let kinds = hook.kinds();
        kinds.contains(&"hung".to_string()) && kinds.contains(&"recovered".to_string())
    });
    let kinds = hook.kinds();
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(
        position(&kinds, "hung") < position(&kinds, "recovered"),
        "{kinds:?}\n{log}"
    );
    assert_eq!(hook.of_kind("stalled").len(), 0, "{kinds:?}");
    let hung = &hook.of_kind("hung")[0];
    assert_eq!(hung["title"], "[lavender] hung: the worker was restarted");
    let body = hung["body"].as_str().unwrap();
    assert!(
        body.starts_with("hung at step 5 for ") && body.contains("; restarted from pretrain-"),
        "{body}"
    );

    env.terminate_daemons();
    env.serve();
    wait_until(T, "the resumed push", || {
        hook.kinds().contains(&"resumed".to_string())
    });
    let resumed = &hook.of_kind("resumed")[0];
    let body = resumed["body"].as_str().unwrap();
    assert!(
        body.starts_with("interrupted by the daemon's exit (SIGTERM/SIGINT); resumed from "),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_space_under_the_floor_is_disk_low_and_status_json_carries_the_counts() {
    let hook = Recorder::start().await;
    // A floor of 1 PiB: above the real free space of any test machine.
    let mut env = Env::new(
        &[],
        &hook.webhook_yaml("  disk_floor_mib: 1073741824\n"),
        "[train]",
    );
    env.serve();
    wait_until(T, "the disk-low push", || {
        hook.kinds().contains(&"disk_low".to_string())
    });
    let push = &hook.of_kind("disk_low")[0];
    let title = push["title"].as_str().unwrap();
    assert!(title.starts_with("[lavender] disk low: "), "{title}");
    assert!(title.ends_with("need 1048576.0 GiB"), "{title}");
    assert_eq!(push["level"], "alert");

    // `status --json` prints the whole body of GET /status, push counts included.
    wait_until(T, "the push to be counted", || {
        env.status()["notifications"]["hook"]["sent"] == 1
    });
    let served = env.status();
    let out = env.run(&["status", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_valid(&printed);
    assert_eq!(printed["notifications"], served["notifications"]);
    let keys = |v: &serde_json::Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<Vec<String>>()
    };
    // The CLI adds which data root it read (`data_root`); the rest is the served status.
    let mut printed_keys = keys(&printed);
    printed_keys.retain(|k| k != "data_root");
    let mut served_keys = keys(&served);
    printed_keys.sort();
    served_keys.sort();
    assert_eq!(printed_keys, served_keys);
    assert_eq!(hook.of_kind("disk_low").len(), 1, "{:?}", hook.kinds());
}

/// An incident an operator ends: a crash (pushed), the daemon's restart, and
/// `lavenderd stop` before the restarted worker trained past the crash (it is
/// frozen with SIGSTOP while the stop is asked, so it cannot); then
/// `start --resume latest` and a crash again. The stop ended the first incident,
/// so the second crash is a new one and pushed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_an_operator_stop_and_a_new_start_is_pushed_again() {
    let hook = Recorder::start().await;
    // Each worker is silent for its first seconds: time to freeze the restarted one
    // before it trains.
    let mut env = Env::new(
        &[
            "--crash-after",
            "3",
            "--total-steps",
            "400",
            "--step-ms",
            "20",
            "--silent-start-ms",
            "3000",
        ],
        &hook.webhook_yaml(""),
        "[train]",
    );
    env.serve();
    env.start(&[]);
    let mut first = None;
    wait_until(T, "the first worker", || {
        first = env.worker_pid();
        first.is_some()
    });
    let mut restarted = None;
    wait_until(T, "the restarted worker", || {
        restarted = env.worker_pid().filter(|&p| Some(p) != first);
        restarted.is_some()
    });
    let restarted = restarted.unwrap();
    // Frozen only once it catches SIGTERM: frozen before, the stop's SIGTERM would
    // kill it unsaved.
    let catches_term = || {
        std::fs::read_to_string(format!("/proc/{restarted}/status"))
            .ok()
            .and_then(|s| {
                let mask = s.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
                u64::from_str_radix(mask.trim(), 16).ok()
            })
            .is_some_and(|m| m & (1 << (nix::libc::SIGTERM - 1)) != 0)
    };
    wait_until(T, "the restarted worker's SIGTERM handler", catches_term);
    send_signal(restarted, nix::libc::SIGSTOP);
    wait_until(T, "the first crashed push", || {
        hook.of_kind("crashed").len() == 1
    });
    let out = std::thread::scope(|s| {
        let stop = s.spawn(|| env.run(&["stop"]));
        env.wait_state("stopping", T);
        send_signal(restarted, nix::libc::SIGCONT);
        stop.join().unwrap()
    });
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    env.wait_state("stopped", T);
    env.start(&["--resume", "latest"]);
    wait_until(Duration::from_secs(30), "the second crashed push", || {
        hook.of_kind("crashed").len() == 2
    });
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    // The first incident ended by the stop, not by a recovery.
    assert!(log.contains("decision outcome: stopped"), "{log}");
    assert!(log.contains("incident over: stopped at "), "{log}");
    assert_eq!(hook.of_kind("recovered").len(), 0, "{:?}", hook.kinds());
    assert!(
        !log.contains("not pushed: step train crashed"),
        "{:?}\n{log}",
        hook.kinds()
    );
}
