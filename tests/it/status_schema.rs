//! The status contract: every state of the pipeline serializes to a document that
//! validates against `tests/fixtures/status.schema.json` (a copy of
//! `../shared/schemas/status.schema.json`), with the values an operator relies on.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};
use lavender::config::PipelineStep;
use lavender::heartbeat::{Heartbeat, WorkerState};
use lavender::status::{DataStatus, DiskStatus, PipelineState, Status, StepState, TrainingStatus};
use lavender_testkit::{schema, schema_path};
use serde_json::{Value, json};

fn assert_valid(name: &str, status: &Status) -> Value {
    let doc = serde_json::to_value(status).unwrap();
    let v = schema();
    let errors: Vec<String> = v
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{name}: status does not match the schema:\n{}\n{doc:#}",
        errors.join("\n")
    );
    // The document survives a round trip through the typed API (the CLI client parses it).
    let back: Status = serde_json::from_value(doc.clone()).unwrap();
    assert_eq!(&back, status, "{name}: round trip");
    doc
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 4, 5, 19, 14, 27).unwrap()
}

fn heartbeat(state: WorkerState, age_s: i64) -> Heartbeat {
    Heartbeat {
        step: 1000,
        total_steps: 50_000,
        stage: "pretrain".into(),
        epoch: Some(0.4),
        epochs: Some(1),
        loss: Some(1.125),
        loss_smooth: Some(0.899),
        lr: Some(9.99e-5),
        grad_norm: Some(0.8),
        steps_per_sec: Some(0.19),
        eta_seconds: Some(289_477),
        timestamp: lavender::time::rfc3339_z(now() - chrono::Duration::seconds(age_s)),
        pid: 13584,
        state,
        latest_checkpoint: Some("pretrain-19-10-00-0005".into()),
        failure: None,
    }
}

const STEPS: [&str; 7] = [
    "downloads",
    "dedup",
    "filter",
    "build_shards",
    "precompute",
    "train",
    "mine_hard",
];

/// A pipeline whose steps before `train` are done and `train` is in `train_state`.
fn status(
    state: PipelineState,
    pid: Option<u32>,
    train_state: StepState,
    training: TrainingStatus,
) -> Status {
    let mut s = Status::never_started(now());
    s.pipeline.running = pid.is_some();
    s.pipeline.pid = pid;
    s.pipeline.chunk = Some("1".into());
    s.pipeline.scale = Some("small".into());
    s.pipeline.state = state;
    s.active_step = (train_state == StepState::Running).then_some(PipelineStep::Train);
    let train_idx = STEPS.iter().position(|s| *s == "train").unwrap();
    s.steps = STEPS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let st = match i.cmp(&train_idx) {
                std::cmp::Ordering::Less => StepState::Done,
                std::cmp::Ordering::Equal => train_state,
                std::cmp::Ordering::Greater => StepState::Pending,
            };
            (name.to_string(), st)
        })
        .collect();
    let counts = BTreeMap::from([
        ("shard_count".to_string(), Some(21)),
        ("documents".to_string(), Some(166_829)),
        ("tokens".to_string(), Some(98_000_000)),
        ("sft_samples".to_string(), None),
    ]);
    s.data = DataStatus::from_counts(counts, training.checkpoints);
    s.disk = DiskStatus::from_bytes(Some("/dev/sda1".into()), 1307 << 30, 555 << 30);
    s.training = training;
    s
}

/// `stale`: the daemon's verdict (the phase's allowance passed without a heartbeat).
fn training(hb: Option<Result<Heartbeat, String>>, stale: bool, alive: bool) -> TrainingStatus {
    TrainingStatus::from_heartbeat(hb, now(), stale, alive, 5, None)
}

/// The shared contract: `$LAVENDER_SHARED_DIR/schemas/status.schema.json`, else
/// `../shared/schemas/status.schema.json` beside the repository.
fn shared_schema_path() -> std::path::PathBuf {
    let shared = std::env::var_os("LAVENDER_SHARED_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    shared.join("schemas/status.schema.json")
}

/// The fixture is the shared contract, byte for byte; without the contract there is
/// nothing to hold the fixture to, which is a failure, not a pass.
#[test]
fn fixture_matches_shared_schema() {
    let shared = shared_schema_path();
    let shared_bytes = std::fs::read(&shared).unwrap_or_else(|e| {
        panic!(
            "the shared status contract {} cannot be read ({e}): check out the shared \
             directory beside this repository, or set LAVENDER_SHARED_DIR to it",
            shared.display()
        )
    });
    let fixture = std::fs::read(schema_path()).unwrap();
    assert!(
        fixture == shared_bytes,
        "tests/fixtures/status.schema.json differs from {}: copy it over",
        shared.display()
    );
}

#[test]
fn never_started() {
    let doc = assert_valid("never started", &Status::never_started(now()));
    assert_eq!(doc["timestamp"], "2026-04-05T19:14:27.000Z");
    assert_eq!(doc["pipeline"]["running"], false);
    assert_eq!(doc["pipeline"]["state"], "idle");
    assert_eq!(doc["pipeline"]["pid"], Value::Null);
    assert_eq!(doc["active_step"], Value::Null);
    let t = &doc["training"];
    for key in [
        "step",
        "total_steps",
        "pct",
        "loss",
        "loss_smooth",
        "lr",
        "steps_per_sec",
        "eta_seconds",
        "eta_hours",
        "heartbeat_age_s",
        "latest_checkpoint",
        "stage",
        "epoch",
        "heartbeat_error",
    ] {
        assert_eq!(t[key], Value::Null, "training.{key}");
    }
    assert_eq!(t["heartbeat_stale"], false);
    assert_eq!(t["running"], false);
    assert_eq!(t["checkpoints"], 0);
    assert_eq!(
        doc["disk"],
        json!({
            "device": null,
            "used_gib": null,
            "avail_gib": null,
            "next_save_bytes": null,
            "time_to_full_s": null
        })
    );
    assert_eq!(doc["schema_version"], lavender::status::SCHEMA_VERSION);
}

#[test]
fn running() {
    let t = training(Some(Ok(heartbeat(WorkerState::Training, 120))), false, true);
    let doc = assert_valid(
        "running",
        &status(PipelineState::Running, Some(13584), StepState::Running, t),
    );
    assert_eq!(doc["pipeline"]["running"], true);
    assert_eq!(doc["pipeline"]["pid"], 13584);
    assert_eq!(doc["active_step"], "train");
    assert_eq!(doc["steps"]["train"], "running");
    assert_eq!(doc["steps"]["mine_hard"], "pending");
    let t = &doc["training"];
    assert_eq!(t["step"], 1000);
    assert_eq!(t["total_steps"], 50_000);
    assert_eq!(t["pct"], 2.0);
    assert_eq!(t["eta_seconds"], 289_477);
    assert_eq!(t["eta_hours"], 80.41);
    assert_eq!(t["heartbeat_age_s"], 120);
    assert_eq!(t["heartbeat_stale"], false);
    assert_eq!(t["running"], true);
    assert_eq!(t["checkpoints"], 5);
    assert_eq!(t["latest_checkpoint"], "pretrain-19-10-00-0005");
    assert_eq!(t["stage"], "pretrain");
    assert_eq!(doc["data"]["shard_count"], 21);
    assert_eq!(doc["data"]["checkpoints"], 5);
    assert_eq!(doc["data"]["documents"], 166_829);
    assert_eq!(doc["data"]["sft_samples"], Value::Null);
    assert_eq!(doc["disk"]["used_gib"], 1307.0);
}

/// A run the daemon brought back by itself says why, and why its last worker failed.
#[test]
fn a_recovered_run_says_why() {
    let t = training(Some(Ok(heartbeat(WorkerState::Training, 3))), false, true);
    let mut s = status(PipelineState::Running, Some(13584), StepState::Running, t);
    s.pipeline.recovery = Some(lavender::status::Recovery {
        reason: lavender::status::RecoveryReason::Hung,
        message: "hung at step 40 for 5 min; restarted from pretrain-19-10-00-0005".into(),
        at: "2026-04-05T19:14:20.000Z".into(),
        checkpoint: Some("pretrain-19-10-00-0005".into()),
    });
    s.pipeline.failure = Some(lavender::failure::Failure::new(
        lavender::failure::FailureKind::OutOfMemory,
        "CUDA out of memory",
    ));
    let doc = assert_valid("recovered", &s);
    assert_eq!(doc["pipeline"]["recovery"]["reason"], "hung");
    assert_eq!(
        doc["pipeline"]["recovery"]["checkpoint"],
        "pretrain-19-10-00-0005"
    );
    assert_eq!(doc["pipeline"]["failure"]["kind"], "out_of_memory");
    let never = assert_valid("never started", &Status::never_started(now()));
    assert_eq!(never["pipeline"]["recovery"], Value::Null);
    assert_eq!(never["pipeline"]["failure"], Value::Null);
}

#[test]
fn too_few_shards_for_the_scale() {
    let t = training(Some(Ok(heartbeat(WorkerState::Training, 10))), false, true);
    let mut s = status(PipelineState::Running, Some(13584), StepState::Running, t);
    s.data
        .extra
        .insert("shards_available".into(), Some(1.into()));
    let notice = s
        .data
        .note_shards_wanted(lavender::config::Scale::Small, 21);
    s.notices.extend(notice);
    let doc = assert_valid("too few shards", &s);
    assert_eq!(doc["data"]["shards_wanted"], 21);
    assert_eq!(
        doc["notices"],
        json!([
            "scale small wants 21 shards but the data fills only 1, so training repeats it; add corpus under data.sources"
        ])
    );
    assert!(
        s.to_text().contains(
            "notice:      scale small wants 21 shards but the data fills only 1, so training repeats it; add corpus under data.sources\n"
        ),
        "{}",
        s.to_text()
    );
    // Shards enough: the count is there, no notice.
    let mut s = status(
        PipelineState::Running,
        Some(13584),
        StepState::Running,
        training(None, false, true),
    );
    s.data
        .extra
        .insert("shards_available".into(), Some(21.into()));
    assert_eq!(
        s.data
            .note_shards_wanted(lavender::config::Scale::Small, 21),
        None
    );
    let doc = assert_valid("shards enough", &s);
    assert_eq!(doc["notices"], json!([]));
    assert_eq!(doc["data"]["shards_wanted"], 21);
}

#[test]
fn stale_heartbeat() {
    let t = training(Some(Ok(heartbeat(WorkerState::Training, 900))), true, true);
    let doc = assert_valid(
        "stale",
        &status(PipelineState::Running, Some(13584), StepState::Running, t),
    );
    assert_eq!(doc["training"]["heartbeat_age_s"], 900);
    assert_eq!(doc["training"]["heartbeat_stale"], true);
    assert_eq!(doc["training"]["running"], true);

    // The same age within the phase's allowance (a long save, say) is not stale.
    let t = training(Some(Ok(heartbeat(WorkerState::Saving, 900))), false, true);
    assert!(!t.heartbeat_stale);
}

#[test]
fn crashed() {
    // The worker is gone while the train step still says running.
    let t = training(Some(Ok(heartbeat(WorkerState::Training, 900))), true, false);
    let doc = assert_valid(
        "crashed",
        &status(PipelineState::Crashed, None, StepState::Running, t),
    );
    assert_eq!(doc["pipeline"]["running"], false);
    assert_eq!(doc["pipeline"]["state"], "crashed");
    assert_eq!(doc["pipeline"]["pid"], Value::Null);
    assert_eq!(doc["steps"]["train"], "running");
    assert_eq!(doc["training"]["running"], false);
    // No worker is alive to be hung: whatever the daemon's verdict was, not stale.
    assert_eq!(doc["training"]["heartbeat_stale"], false);
    assert_eq!(doc["training"]["step"], 1000);
}

#[test]
fn stopped() {
    let t = training(
        Some(Ok(heartbeat(WorkerState::Stopping, 3600))),
        false,
        false,
    );
    let doc = assert_valid(
        "stopped",
        &status(PipelineState::Stopped, None, StepState::Pending, t),
    );
    assert_eq!(doc["pipeline"]["state"], "stopped");
    assert_eq!(doc["pipeline"]["running"], false);
    assert_eq!(doc["active_step"], Value::Null);
    assert_eq!(doc["training"]["running"], false);
    // A worker that stopped on request is not "stale".
    assert_eq!(doc["training"]["heartbeat_stale"], false);
    assert_eq!(doc["training"]["heartbeat_age_s"], 3600);
}

#[test]
fn finished() {
    let mut hb = heartbeat(WorkerState::Finished, 86_400);
    hb.step = 50_000;
    hb.eta_seconds = Some(0);
    let t = training(Some(Ok(hb)), false, false);
    let mut s = status(PipelineState::Finished, None, StepState::Done, t);
    s.steps.insert("mine_hard".into(), StepState::Done);
    let doc = assert_valid("finished", &s);
    assert_eq!(doc["pipeline"]["state"], "finished");
    assert_eq!(doc["training"]["pct"], 100.0);
    assert_eq!(doc["training"]["eta_hours"], 0.0);
    assert_eq!(doc["training"]["running"], false);
    assert_eq!(doc["training"]["heartbeat_stale"], false);
}

#[test]
fn malformed_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let path = lavender::heartbeat::path(dir.path());
    std::fs::write(&path, br#"{"step": 12, "tot"#).unwrap();
    let err = lavender::heartbeat::read(&path).unwrap_err();
    assert!(matches!(err, lavender::Error::Malformed { .. }), "{err:?}");

    let t = training(Some(Err(err.to_string())), false, true);
    let doc = assert_valid(
        "malformed heartbeat",
        &status(PipelineState::Running, Some(13584), StepState::Running, t),
    );
    let t = &doc["training"];
    assert!(
        t["heartbeat_error"].as_str().unwrap().contains("truncated"),
        "{t}"
    );
    assert_eq!(t["step"], Value::Null);
    assert_eq!(t["pct"], Value::Null);
    assert_eq!(t["heartbeat_age_s"], Value::Null);
    assert_eq!(t["running"], true);
    assert_eq!(t["checkpoints"], 5);
}

#[test]
fn validator_rejects_broken_documents() {
    let v = schema();
    let good = serde_json::to_value(status(
        PipelineState::Running,
        Some(1),
        StepState::Running,
        training(Some(Ok(heartbeat(WorkerState::Training, 1))), false, true),
    ))
    .unwrap();
    assert!(v.is_valid(&good));

    type Breaker = fn(&mut Value);
    let broken: [(&str, Breaker); 7] = [
        ("missing timestamp", |d| {
            d.as_object_mut().unwrap().remove("timestamp");
        }),
        ("missing training.heartbeat_stale", |d| {
            d["training"]
                .as_object_mut()
                .unwrap()
                .remove("heartbeat_stale");
        }),
        ("missing disk", |d| {
            d.as_object_mut().unwrap().remove("disk");
        }),
        ("pct as string", |d| d["training"]["pct"] = json!("2%")),
        ("running as null", |d| {
            d["pipeline"]["running"] = Value::Null
        }),
        ("bad step state", |d| d["steps"]["train"] = json!("walking")),
        ("timestamp without Z", |d| {
            d["timestamp"] = json!("2026-04-05T19:14:27+00:00")
        }),
    ];
    for (name, break_it) in broken {
        let mut doc = good.clone();
        break_it(&mut doc);
        assert!(
            !v.is_valid(&doc),
            "{name}: validator accepted a broken status"
        );
    }
}

#[test]
fn text_view_of_a_running_pipeline() {
    let t = training(Some(Ok(heartbeat(WorkerState::Training, 120))), false, true);
    let s = status(PipelineState::Running, Some(13584), StepState::Running, t);
    let text = s.to_text();
    for want in [
        "pipeline:    running (pid 13584)",
        "step:        1000 / 50000 (2.0%)",
        "loss:        1.1250 (smooth 0.8990)",
        "speed:       0.190 steps/s",
        "ETA:         80.4 h (289477 s)",
        "heartbeat:   120 s ago · ok",
        "checkpoints: 5 (latest pretrain-19-10-00-0005)",
        "disk:        /dev/sda1 · 1307 GiB used · 555 GiB free",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}
