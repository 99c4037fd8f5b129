//! The decision log under a real daemon and the fake worker: a night of trouble
//! (a hang, a divergence, crashes, giving up) written down one decision at a time
//! in `state/decisions.jsonl`, each with what the daemon saw, the rule that fired,
//! what it did and how it turned out; `lavenderd incidents` shows them (`--json`
//! for tools) without a daemon. Observe mode (`supervisor.mode: observe`) with a
//! crashing worker: nothing restarted, and the log and `incidents` say what would
//! have been done.

use std::time::Duration;

use lavender_testkit::*;
use serde_json::Value;

fn incidents_json(env: &Env) -> Vec<Value> {
    let out = env.run(&["incidents", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str::<Value>(&stdout(&out))
        .unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
        .as_array()
        .unwrap()
        .clone()
}

/// Worker 1 hangs at step 3 (and ignores SIGTERM): killed, restarted. Worker 2
/// diverges at step 7: rolled back. Worker 3 crashes: restarted (restart 2 of 2).
/// Worker 4 crashes: the daemon gives up. Each worker trains a few steps past its
/// checkpoint first, so the decision before it recovered.
#[test]
fn a_night_of_decisions_is_written_down_with_evidence_rule_and_outcome() {
    let mut env = Env::new(
        &[
            "--hang-after",
            "3",
            "--hang-times",
            "1",
            "--ignore-sigterm",
            "--crash-after",
            "5",
            "--crash-kind",
            "diverged,crash",
            "--step-ms",
            "150",
            "--checkpoint-every",
            "2",
            "--total-steps",
            "100000",
        ],
        "  stale_after_s: 1\n  stall_kill_grace_s: 0.5\n  max_restarts: 2\n  restart_backoff_s: [0.2]",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_state("failed", Duration::from_secs(60));
    let decisions = incidents_json(&env);
    let kinds: Vec<&str> = decisions
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["hang_kill", "restart", "rollback", "restart", "give_up"],
        "{decisions:#?}"
    );
    for d in &decisions {
        assert_eq!(d["mode"], "acted", "{d:#}");
        assert_eq!(d["step"], "train", "{d:#}");
        assert!(d["rule"]["key"].as_str().unwrap().contains('.'), "{d:#}");
        assert!(!d["did"].as_str().unwrap().is_empty(), "{d:#}");
        assert!(d["outcome"].is_object(), "every outcome is known: {d:#}");
    }
    let (hang, restart, rollback, crash, give_up) = (
        &decisions[0],
        &decisions[1],
        &decisions[2],
        &decisions[3],
        &decisions[4],
    );
    // The hang: the heartbeat's age, the step, the allowance that fired.
    assert!(
        hang["saw"]["heartbeat_age_s"].as_f64().unwrap() >= 1.0,
        "{hang:#}"
    );
    assert_eq!(hang["saw"]["last_step"], 3, "{hang:#}");
    assert_eq!(hang["rule"]["key"], "supervisor.stale_after_s", "{hang:#}");
    assert_eq!(hang["rule"]["value"], 1.0, "{hang:#}");
    assert!(
        hang["did"]
            .as_str()
            .unwrap()
            .contains("SIGKILL after 0.5 s")
    );
    assert_eq!(restart["rule"]["key"], "supervisor.on_stall", "{restart:#}");
    assert!(
        restart["did"]
            .as_str()
            .unwrap()
            .starts_with("restart 1 of 2"),
        "{restart:#}"
    );
    // The hang incident recovered: worker 2 trained past the checkpoint of step 2.
    for d in [hang, restart] {
        assert_eq!(d["outcome"]["result"], "recovered", "{d:#}");
        assert!(
            d["outcome"]["text"]
                .as_str()
                .unwrap()
                .starts_with("training past step "),
            "{d:#}"
        );
    }
    assert_eq!(rollback["rule"]["key"], "supervisor.on_diverged");
    assert_eq!(
        rollback["saw"]["failure"]["kind"], "diverged",
        "{rollback:#}"
    );
    assert!(
        rollback["did"].as_str().unwrap().contains("rolled back to"),
        "{rollback:#}"
    );
    assert_eq!(
        crash["rule"]["key"], "supervisor.on_failure.crash",
        "{crash:#}"
    );
    assert_eq!(crash["saw"]["exit"], "exit code 1", "{crash:#}");
    assert_eq!(crash["saw"]["failure"]["kind"], "crash", "{crash:#}");
    assert_eq!(crash["saw"]["restarts"], 1, "{crash:#}");
    assert_eq!(
        give_up["rule"]["key"], "supervisor.max_restarts",
        "{give_up:#}"
    );
    assert_eq!(give_up["rule"]["value"], 2, "{give_up:#}");
    assert_eq!(give_up["saw"]["restarts"], 2, "{give_up:#}");
    assert_eq!(give_up["outcome"]["result"], "gave_up", "{give_up:#}");
    // The last restart's worker failed again before anything else was known, or
    // recovered first (it trains a few steps): either is written down.
    assert!(
        ["recovered", "failed_again"].contains(&crash["outcome"]["result"].as_str().unwrap()),
        "{crash:#}"
    );

    // For a person, without a daemon: each decision with its evidence, rule, outcome.
    env.kill_daemons();
    let out = env.run(&["incidents"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "hang kill  step train",
        "rule:    supervisor.stale_after_s: 1.0",
        "saw:     ",
        "last heartbeat ",
        "rollback  step train",
        "diverged: fake diverged failure at step 7",
        "rule:    supervisor.on_failure.crash: restart",
        "give up  step train",
        "rule:    supervisor.max_restarts: 2",
        "outcome: recovered: training past step ",
        "outcome: gave up: the pipeline failed at ",
    ] {
        assert!(text.contains(needle), "{needle:?} in:\n{text}");
    }
    let out = env.run(&["incidents", "--last", "1", "--json"]);
    let last: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(last.as_array().unwrap().len(), 1);
    assert_eq!(last[0]["kind"], "give_up");
}

/// `supervisor.mode: observe` with a worker that crashes: it is not restarted; the
/// daemon's log and `incidents` say what would have been done.
#[test]
fn observe_mode_restarts_nothing_and_says_what_it_would_have_done() {
    let mut env = Env::new(
        &[
            "--crash-after",
            "3",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "2",
        ],
        "  mode: observe",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    let st = env.wait_state("failed", Duration::from_secs(20));
    assert_eq!(env.train_calls().len(), 1, "nothing was restarted");
    assert_eq!(st["pipeline"]["restarts"], 0, "{st:#}");
    let log = env.log_with("observe mode: would have: restart", Duration::from_secs(10));
    assert!(log.contains("nothing was done"), "{log}");
    // The pipeline log says it too, beside the worker's own output.
    let pipeline_log = stdout(&env.run(&["logs", "-n", "200"]));
    assert!(
        pipeline_log
            .contains("observe mode: would have: restart (supervisor.on_failure.crash: restart)"),
        "{pipeline_log}"
    );
    let decisions = incidents_json(&env);
    assert_eq!(decisions.len(), 1, "{decisions:#?}");
    let d = &decisions[0];
    assert_eq!(d["kind"], "restart");
    assert_eq!(d["mode"], "would_have");
    assert_eq!(d["saw"]["exit"], "exit code 3");
    assert_eq!(d["rule"]["key"], "supervisor.on_failure.crash");
    assert_eq!(d["outcome"]["result"], "not_acted");
    let text = stdout(&env.run(&["incidents"]));
    assert!(
        text.contains("restart (observe mode: would have)  step train"),
        "{text}"
    );
    assert!(
        text.contains("outcome: not acted (observe mode): "),
        "{text}"
    );
    // The status says it too.
    assert!(
        st["pipeline"]["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("would have: restart 1 of 3"),
        "{st:#}"
    );
}
