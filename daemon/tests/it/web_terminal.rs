//! The terminal views: `status --watch` redraws as training advances, and
//! `start --foreground` prints milestone lines and a final summary (off a
//! terminal the progress bar hides itself and the lines stay plain).

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lavender_testkit::*;

/// "step/total" from a view's progress line.
fn progress(frame: &str) -> Option<u64> {
    let line = frame.lines().find(|l| l.starts_with('['))?;
    line.split_whitespace()
        .nth(1)?
        .split('/')
        .next()?
        .parse()
        .ok()
}

#[test]
fn status_watch_redraws_as_training_advances() {
    let mut env = Env::new(
        &["--total-steps", "100000", "--step-ms", "20"],
        "",
        "[train]",
    );
    env.serve();
    let r = env.uds("POST", "/pipeline/start", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);

    let mut child = env
        .cmd()
        .args(["status", "--watch", "--interval", "0.1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Frames are separated by a blank line off a terminal.
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut frame = String::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.is_empty() {
                if tx.send(std::mem::take(&mut frame)).is_err() {
                    break;
                }
            } else {
                frame.push_str(&line);
                frame.push('\n');
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut steps = Vec::new();
    let mut last = String::new();
    while steps.len() < 3 || steps.windows(2).filter(|w| w[1] > w[0]).count() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        last = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no advancing frames; steps {steps:?}, last:\n{last}"));
        if let Some(s) = progress(&last) {
            steps.push(s);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(last.starts_with("lavender  running  step train"), "{last}");
    assert!(last.contains("/100000 ("), "{last}");
    assert!(last.contains("it/s  ETA"), "{last}");
    assert!(last.contains("steps  ▶ train"), "{last}");
}

#[test]
fn status_watch_rejects_a_useless_interval() {
    let env = Env::new(&[], "", "[train]");
    let out = env.run(&["status", "--watch", "--interval", "0"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--interval 0: give at least 0.05 seconds"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["status", "--interval", "1"]);
    assert!(
        !out.status.success(),
        "--interval without --watch is refused"
    );
}

#[test]
fn start_foreground_prints_milestones_and_a_summary() {
    let env = Env::new(
        &[
            "--total-steps",
            "30",
            "--step-ms",
            "5",
            "--checkpoint-every",
            "10",
        ],
        "",
        "[downloads, train]",
    );
    let out = env.run(&["start", "--foreground"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    for expected in [
        "pipeline           idle → running (downloads)",
        "pipeline           running (train)",
        "run_started        fake run started",
        "checkpoint_saved   saved pretrain-",
        "final_saved        saved pretrain-",
        "pipeline           running → finished",
        // The alert a finished run raises, before the summary, not as a warning.
        "finished           pipeline finished after",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
    let last = err.lines().last().unwrap();
    assert!(last.starts_with("[finished] - 30/30"), "{err}");
}
