//! `GET /metrics` parsed by Prometheus's own Python client parser, idle and while
//! a worker that crashed once trains again.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use lavender_testkit::http::get;
use lavender_testkit::*;
use serde_json::Value;

/// Parses exposition text with `prometheus_client.parser`; prints one JSON object:
/// family name → {type, help, samples: [[name, labels, value]]}.
const PARSE: &str = r#"
import json, math, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    out[f.name] = {"type": f.type, "help": f.documentation,
                   "samples": [[s.name, s.labels, None if math.isnan(s.value) else s.value] for s in f.samples]}
print(json.dumps(out))
"#;

fn python() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

fn parse(text: &str) -> Value {
    let py = python();
    let mut child = Command::new(&py)
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; run scripts/ci-deps.sh", py.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("No module named 'prometheus_client'"),
        "the metrics test needs Prometheus's Python parser: {} -m pip install prometheus_client (scripts/ci-deps.sh installs it)",
        py.display()
    );
    assert!(
        out.status.success(),
        "prometheus_client rejected /metrics: {err}\n{text}"
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn metrics(addr: &str) -> (String, Value) {
    let r = get(addr, "/metrics");
    assert_eq!(r.status, 200);
    assert!(
        r.head.contains("content-type: text/plain; version=0.0.4"),
        "{}",
        r.head
    );
    let text = r.body;
    let parsed = parse(&text);
    (text, parsed)
}

/// The single unlabelled sample of a family, if any.
fn value(m: &Value, family: &str) -> Option<f64> {
    let samples = m[family]["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no family {family}: {m}"));
    samples.first().map(|s| s[2].as_f64().unwrap())
}

/// The seconds of one goodput bucket (0 before the ledger counted the run).
fn goodput(m: &Value, bucket: &str) -> f64 {
    m["lavender_goodput_seconds"]["samples"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s[1]["bucket"] == bucket)
        .and_then(|s| s[2].as_f64())
        .unwrap_or(0.0)
}

fn state_one_hot(m: &Value) -> Vec<(String, f64)> {
    m["lavender_pipeline_state"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s[1]["state"].as_str().unwrap().to_string(),
                s[2].as_f64().unwrap(),
            )
        })
        .collect()
}

const GAUGES: &[&str] = &[
    "lavender_training_step",
    "lavender_training_total_steps",
    "lavender_training_loss",
    "lavender_training_loss_smooth",
    "lavender_training_learning_rate",
    "lavender_training_steps_per_second",
    "lavender_training_eta_seconds",
    "lavender_heartbeat_age_seconds",
    "lavender_heartbeat_stale",
    "lavender_checkpoints",
    "lavender_verified_checkpoints",
    "lavender_disk_available_bytes",
    "lavender_pipeline_state",
    "lavender_goodput_seconds",
    "lavender_goodput_ratio",
    "lavender_checkpoint_storage_error",
];
// The parser names counter families without their `_total` suffix.
const COUNTERS: &[&str] = &[
    "lavender_worker_restarts",
    "lavender_notifications",
    "lavender_checkpoint_reads",
    "lavender_checkpoints_dropped",
];

#[test]
fn metrics_are_valid_prometheus_text_and_follow_the_pipeline() {
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
    let addr = env.addr();

    // Idle: every family declared with HELP and TYPE; unknown values left out.
    let (text, m) = metrics(&addr);
    for name in GAUGES {
        assert_eq!(m[name]["type"], "gauge", "{name}: {m}");
        assert!(!m[name]["help"].as_str().unwrap().is_empty(), "{name}");
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
    }
    for name in COUNTERS {
        assert_eq!(m[name]["type"], "counter", "{name}: {m}");
        assert!(
            text.contains(&format!("# TYPE {name}_total counter")),
            "{name}"
        );
    }
    assert_eq!(value(&m, "lavender_training_step"), None);
    assert_eq!(value(&m, "lavender_heartbeat_stale"), Some(0.0));
    assert_eq!(value(&m, "lavender_worker_restarts"), Some(0.0));
    assert!(value(&m, "lavender_disk_available_bytes").unwrap() > 0.0);
    assert_eq!(
        m["lavender_notifications"]["samples"],
        serde_json::json!([])
    );
    let states = state_one_hot(&m);
    let names: Vec<&str> = states.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "idle",
            "running",
            "stopping",
            "stopped",
            "finished",
            "crashed",
            "failed",
            "waiting_for_disk"
        ],
        "one sample per pipeline state"
    );
    assert_eq!(
        states.iter().filter(|s| s.1 == 1.0).collect::<Vec<_>>(),
        [&("idle".to_string(), 1.0)]
    );

    // Training again after one crash restart.
    let r = env.uds("POST", "/pipeline/start", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let mut m = Value::Null;
    wait_until(
        Duration::from_secs(20),
        "a restarted worker past step 10",
        || {
            m = metrics(&addr).1;
            value(&m, "lavender_worker_restarts") == Some(1.0)
                && value(&m, "lavender_training_step").is_some_and(|s| s > 10.0)
                && goodput(&m, "productive") > 0.0
        },
    );
    // The goodput ledger's buckets, the crash's among them.
    let buckets = m["lavender_goodput_seconds"]["samples"].as_array().unwrap();
    assert_eq!(buckets.len(), 10, "{buckets:?}");
    assert!(goodput(&m, "startup") > 0.0, "{buckets:?}");
    let ratio = value(&m, "lavender_goodput_ratio").unwrap();
    assert!(ratio > 0.0 && ratio < 1.0, "{ratio}");
    assert_eq!(value(&m, "lavender_training_total_steps"), Some(100000.0));
    assert_eq!(value(&m, "lavender_training_learning_rate"), Some(1e-3));
    assert_eq!(value(&m, "lavender_training_steps_per_second"), Some(50.0));
    assert!(value(&m, "lavender_training_loss").unwrap() > 0.0);
    assert!(value(&m, "lavender_training_eta_seconds").unwrap() > 0.0);
    assert!(value(&m, "lavender_checkpoints").unwrap() >= 1.0);
    assert!(value(&m, "lavender_heartbeat_age_seconds").unwrap() < 5.0);
    let on: Vec<String> = state_one_hot(&m)
        .into_iter()
        .filter(|s| s.1 == 1.0)
        .map(|s| s.0)
        .collect();
    assert_eq!(on, ["running"]);
}
