//! A heartbeat written into the run directory shows in `GET /status` by file
//! events alone (the periodic safety refresh is pushed out of the way), with the
//! OS's events and with the polling fallback used when inotify's limits are
//! reached. Each test prints the latency it saw, write to visible; it asserts only
//! that every heartbeat shows up.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lavender::heartbeat::{self, Heartbeat, WorkerState};
use lavender_testkit::*;

/// Longer than any test: only file events refresh the status.
const NO_SAFETY_REFRESH: [&str; 2] = ["--status-safety-refresh-ms", "600000"];

/// A daemon on a data root that already holds a run directory (the one the status
/// is about while no pipeline runs).
fn daemon_with_a_run(extra_args: &[&str]) -> (Env, PathBuf) {
    let mut env = Env::new(&[], "", "[train]");
    let run = env.data_root.join("checkpoints/run-2026-01-01_00-00-00");
    std::fs::create_dir_all(&run).unwrap();
    env.serve_args = NO_SAFETY_REFRESH
        .iter()
        .chain(extra_args)
        .map(|a| a.to_string())
        .collect();
    env.serve();
    (env, run)
}

fn write_heartbeat(run: &std::path::Path, step: u64) {
    let hb = Heartbeat {
        step,
        total_steps: 1000,
        stage: "pretrain".into(),
        epoch: Some(0.0),
        epochs: Some(1),
        loss: Some(3.0),
        loss_smooth: Some(3.0),
        lr: Some(1e-3),
        grad_norm: Some(1.0),
        steps_per_sec: Some(10.0),
        eta_seconds: Some(100),
        timestamp: lavender::time::rfc3339_z(lavender::time::now_utc()),
        pid: std::process::id(),
        state: WorkerState::Training,
        latest_checkpoint: None,
        failure: None,
    };
    heartbeat::write(run, &hb).unwrap();
}

fn status_step(env: &Env) -> Option<u64> {
    env.tcp("GET", "/status", None, None).json()["training"]["step"].as_u64()
}

/// Writes heartbeats one by one, each time polling `/status` until it shows the
/// new step; returns the latencies.
fn latencies(env: &Env, run: &std::path::Path, writes: u64) -> Vec<Duration> {
    let mut seen = Vec::new();
    for step in 1..=writes {
        write_heartbeat(run, step);
        let written = Instant::now();
        // A tight loop: the measurement's resolution is one request (about 1 ms).
        while status_step(env) != Some(step) {
            assert!(
                written.elapsed() < Duration::from_secs(10),
                "heartbeat step {step} never showed in /status"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        seen.push(written.elapsed());
        // Quiet between writes: each is a first change, not part of a burst.
        std::thread::sleep(Duration::from_millis(120));
    }
    // The whole body, for the schema.
    env.status();
    seen
}

fn report(what: &str, mut d: Vec<Duration>) {
    d.sort();
    let ms = |x: Duration| x.as_secs_f64() * 1000.0;
    eprintln!(
        "{what}: heartbeat write -> visible in /status over {} writes: min {:.1} ms, median {:.1} ms, max {:.1} ms",
        d.len(),
        ms(d[0]),
        ms(d[d.len() / 2]),
        ms(d[d.len() - 1])
    );
}

#[test]
fn a_heartbeat_shows_in_the_status_by_file_events() {
    let (env, run) = daemon_with_a_run(&[]);
    let d = latencies(&env, &run, 15);
    report("native events", d);
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(!log.contains("polling"), "{log}");
}

#[test]
fn when_inotify_is_exhausted_the_status_polls_instead() {
    let (env, run) = daemon_with_a_run(&["--simulate-inotify-exhausted"]);
    let d = latencies(&env, &run, 5);
    report("polling fallback (poll_interval_ms 50)", d);
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(
        log.contains("the inotify limit is reached") && log.contains("every 50 ms instead"),
        "{log}"
    );
    assert_eq!(log.matches("inotify limit").count(), 1, "said once: {log}");
}
