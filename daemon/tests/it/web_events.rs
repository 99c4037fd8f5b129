//! `GET /events` against the real daemon and the fake worker: items come in
//! order with ids, a reader resumes exactly with `Last-Event-ID`, a reader with
//! an unknown id is told it missed events, crashes arrive as alerts, and an open
//! stream ends (instead of holding up the exit) when the daemon shuts down.

use std::time::Duration;

use lavender_testkit::sse::{SseClient, SseEvent};
use lavender_testkit::*;

const LONG_RUN: &[&str] = &[
    "--total-steps",
    "100000",
    "--step-ms",
    "20",
    "--checkpoint-every",
    "10",
];
const T: Duration = Duration::from_secs(20);

fn start(env: &Env) {
    let r = env
        .uds("POST", "/pipeline/start", Some("{}"))
        .expect("the socket answers");
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn events_come_in_order_and_a_reader_resumes_by_last_event_id() {
    let mut env = Env::new(LONG_RUN, "", "[train]");
    env.serve();
    let addr = env.addr();

    // A new reader gets a snapshot first (no id: it is not part of the sequence).
    let mut a = SseClient::connect(&addr, None);
    let first = a.next(T).unwrap();
    assert_eq!(first.event, "status", "{first:?}");
    assert!(first.id.is_none());
    assert_eq!(first.json()["status"]["pipeline"]["state"], "idle");

    start(&env);
    // Until two checkpoints were saved: state changes, heartbeats, milestones.
    let mut saves = 0;
    let seen = a.until(T, |e| {
        if e.event == "milestone" && e.json()["kind"] == "checkpoint_saved" {
            saves += 1;
        }
        saves == 2
    });
    let seqs: Vec<u64> = seen
        .iter()
        .map(|e| e.seq().expect("live items carry ids"))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "ids not increasing: {seqs:?}"
    );
    let kinds: Vec<&str> = seen.iter().map(|e| e.event.as_str()).collect();
    assert!(kinds.contains(&"state"), "{kinds:?}");
    assert!(kinds.contains(&"heartbeat"), "{kinds:?}");
    // (Before it, the state the daemon started in, for a reader there before the
    // feed's first pass.)
    let state = seen
        .iter()
        .find(|e| e.event == "state" && e.json()["state"] != "idle")
        .unwrap()
        .json();
    assert_eq!(state["state"], "running");
    assert_eq!(state["previous"], "idle");
    assert_eq!(state["steps"][0]["name"], "train");
    // Heartbeat steps never go backwards, and milestones name the run.
    let steps: Vec<u64> = seen
        .iter()
        .filter(|e| e.event == "heartbeat")
        .filter_map(|e| e.json()["status"]["training"]["step"].as_u64())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
    assert!(steps.last().unwrap() >= &10, "{steps:?}");
    let run_started = seen
        .iter()
        .find(|e| e.json()["kind"] == "run_started")
        .expect("run_started");
    assert!(
        run_started.json()["run"]
            .as_str()
            .unwrap()
            .starts_with("run-")
    );

    // Resume after the third item: exactly what `a` saw after it, same ids, no snapshot.
    let resume_at = &seen[2];
    let mut b = SseClient::connect(&addr, resume_at.id.as_deref());
    for expected in &seen[3..] {
        let got = b.next(T).unwrap();
        assert_eq!(&got, expected);
    }

    // An id this daemon never issued (an earlier daemon's): told so, then a fresh start.
    let mut c = SseClient::connect(&addr, Some("1-5"));
    assert_eq!(c.next(T).unwrap().event, "reset");
    let replay = c.until(T, |e| e.event == "status");
    assert!(
        replay
            .iter()
            .any(|e| e.event == "milestone" && e.json()["kind"] == "checkpoint_saved"),
        "a fresh reader gets the recent milestones: {replay:?}"
    );
    assert!(
        replay.iter().all(|e| e.event != "heartbeat"),
        "old heartbeats are not replayed"
    );
}

#[test]
fn a_crash_is_streamed_as_an_alert_and_state_changes() {
    let mut env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "20",
            "--crash-after",
            "5",
            "--crash-times",
            "1",
        ],
        "",
        "[train]",
    );
    env.serve();
    let mut s = SseClient::connect(&env.addr(), None);
    start(&env);
    let seen = s.until(T, |e| {
        e.event == "state" && e.json()["previous"] == "crashed"
    });
    let alert = seen
        .iter()
        .find(|e| e.event == "alert")
        .expect("an alert")
        .json();
    assert_eq!(alert["kind"], "crashed");
    assert_eq!(alert["step"], "train");
    assert!(
        alert["message"].as_str().unwrap().contains("restart 1/"),
        "{alert}"
    );
    let states: Vec<String> = seen
        .iter()
        .filter(|e| e.event == "state")
        .map(|e| e.json()["state"].as_str().unwrap().to_string())
        .collect();
    // A reader that connected before the feed's first pass also hears the state the
    // daemon started in.
    let run = states
        .iter()
        .skip_while(|s| *s == "idle")
        .collect::<Vec<_>>();
    assert_eq!(run, ["running", "crashed", "running"], "{states:?}");
}

#[test]
fn an_open_stream_ends_cleanly_when_the_daemon_shuts_down() {
    let mut env = Env::new(LONG_RUN, "", "[train]");
    let pid = env.serve() as i32;
    start(&env);
    let mut s = SseClient::connect(&env.addr(), None);
    s.until(T, |e| e.event == "heartbeat");

    send_signal(pid, 15);
    // The stream says why it ends, then ends; the daemon exits (it does not wait on us).
    let rest: Vec<SseEvent> = std::iter::from_fn(|| s.next(T)).collect();
    let last = rest.last().expect("events after SIGTERM");
    assert_eq!(last.event, "shutdown", "{rest:?}");
    assert!(
        rest.iter()
            .any(|e| e.event == "state" && e.json()["state"] == "stopping"),
        "the graceful stop is streamed before the end: {rest:?}"
    );
    wait_until(Duration::from_secs(10), "the daemon to exit", || {
        !alive(pid)
    });
    // The stream is still open from our side: the daemon did not wait for it.
    assert!(s.next(Duration::from_secs(1)).is_none());
}
