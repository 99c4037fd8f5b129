use proptest::prelude::*;

use super::tensorboard::{frame, scalar, text, unframe};
use super::*;

#[test]
fn a_record_line_gives_its_numbers_under_valid_names_and_nothing_else() {
    let line = r#"{"step":12,"loss":2.5,"learning_rate":0.001,"stage":"sft","window":5,"eval/acc":1,"bad key":3,"nan":null,"s":"x","epoch":0.5}"#;
    let mut got: Vec<(String, u64, f64)> = points(line)
        .into_iter()
        .map(|p| (p.key, p.step, p.value))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        [
            ("epoch".into(), 12, 0.5),
            ("eval/acc".into(), 12, 1.0),
            ("learning_rate".into(), 12, 0.001),
            ("loss".into(), 12, 2.5),
        ]
    );
    for line in [
        "",
        "[]",
        "{\"loss\":1}",
        "{\"step\":-1,\"loss\":1}",
        "{\"step\":\"3\"}",
    ] {
        assert!(points(line).is_empty(), "{line}");
    }
}

#[test]
fn each_step_is_logged_once_and_a_rollback_logs_the_retrained_again() {
    let mut p = Progress::default();
    let at = |step| Point {
        key: "loss".into(),
        step,
        value: 1.0,
    };
    for s in 1..=30 {
        assert!(p.fresh(&at(s)));
        p.logged(&at(s));
    }
    // A crash restart from the checkpoint at 20 replays 21..=30: not again.
    assert!((21..=30).all(|s| !p.fresh(&at(s))));
    assert!(p.fresh(&at(31)));
    // A rollback to 20: 21.. are new values.
    p.rolled_back_to(20);
    assert!(p.fresh(&at(21)));
    assert!(!p.fresh(&at(20)));
    // Another metric has its own mark.
    assert!(p.fresh(&Point {
        key: "eval_loss".into(),
        step: 5,
        value: 1.0
    }));
}

#[test]
fn an_identity_is_made_once_and_a_damaged_one_is_replaced() {
    let state = tempfile::tempdir().unwrap();
    let id = Identity::read_or_make(state.path(), "run-2026-01-01_00-00-00").unwrap();
    assert_eq!(id.wandb_run_id.len(), 8);
    let again = Identity::read_or_make(state.path(), "run-2026-01-01_00-00-00").unwrap();
    assert_eq!(id, again, "the same lineage keeps its ids");
    let other = Identity::read_or_make(state.path(), "run-2026-01-02_00-00-00").unwrap();
    assert_ne!(id.wandb_run_id, other.wandb_run_id);
    let run = MlflowRun {
        uri: "http://127.0.0.1:5000".into(),
        experiment_id: "1".into(),
        run_id: "abc123".into(),
    };
    let set = Identity::set_mlflow(state.path(), &id.lineage, run.clone()).unwrap();
    assert_eq!(set.wandb_run_id, id.wandb_run_id);
    assert_eq!(
        run.url(),
        "http://127.0.0.1:5000/#/experiments/1/runs/abc123"
    );
    let second = MlflowRun {
        run_id: "zzz".into(),
        ..run.clone()
    };
    let kept = Identity::set_mlflow(state.path(), &id.lineage, second).unwrap();
    assert_eq!(kept.mlflow, Some(run), "a run made since is kept");

    let path = Identity::path(state.path(), &id.lineage).unwrap();
    std::fs::write(
        &path,
        br#"{"lineage":"run-2026-01-01_00-00-00","wandb_run_id":"../../x"}"#,
    )
    .unwrap();
    assert_eq!(Identity::read(state.path(), &id.lineage), None);
    assert!(Identity::path(state.path(), "../etc").is_none());
    assert!(Progress::path(state.path(), "run-1", "../x").is_none());
}

#[test]
fn the_worker_is_told_the_lineage_s_ids() {
    let config = crate::config::Config::from_yaml_str(
        "tracking:\n  mlflow: {uri: 'http://h:5000', experiment: e}\n  tensorboard: {dir: /tb}\n  wandb: {project: p, entity: t, mode: offline}\n",
        "c.yaml",
    )
    .unwrap();
    let id = Identity {
        lineage: "run-1".into(),
        wandb_run_id: "abcd1234".into(),
        mlflow: Some(MlflowRun {
            uri: "http://h:5000".into(),
            experiment_id: "3".into(),
            run_id: "r1".into(),
        }),
    };
    let env: BTreeMap<String, String> = worker_env(&config.tracking, &id).into_iter().collect();
    for (k, v) in [
        ("WANDB_RUN_ID", "abcd1234"),
        ("WANDB_RESUME", "allow"),
        ("WANDB_PROJECT", "p"),
        ("WANDB_ENTITY", "t"),
        ("WANDB_MODE", "offline"),
        ("MLFLOW_TRACKING_URI", "http://h:5000"),
        ("MLFLOW_EXPERIMENT_NAME", "e"),
        ("MLFLOW_RUN_ID", "r1"),
        ("TENSORBOARD_LOGGING_DIR", "/tb/run-1"),
    ] {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}: {env:?}");
    }
}

#[test]
fn event_records_are_framed_as_tensorboard_reads_them() {
    // CRC-32C's check value, masked as TensorBoard masks it.
    assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    let a = scalar(1.0, 7, "loss", 2.5);
    let b = text(2.0, 7, "lavender/events", "restart");
    let mut file = frame(&a);
    file.extend(frame(&b));
    assert_eq!(unframe(&file), Some(vec![a, b]));
    let mut torn = file.clone();
    torn.pop();
    assert_eq!(unframe(&torn), None);
    let mut flipped = file.clone();
    flipped[20] ^= 1;
    assert_eq!(unframe(&flipped), None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_line_gives_valid_points_or_none(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let line = String::from_utf8_lossy(&bytes);
        for p in points(&line) {
            prop_assert!(metric_key(&p.key) && p.value.is_finite());
        }
    }

    #[test]
    fn any_bytes_unframe_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = unframe(&bytes);
    }

    #[test]
    fn any_object_of_numbers_round_trips(step in 0u64..1_000_000, loss in -1e6f64..1e6) {
        let line = format!("{{\"step\":{step},\"loss\":{loss}}}");
        let p = points(&line);
        prop_assert_eq!(p.len(), 1);
        prop_assert_eq!(p[0].step, step);
        prop_assert_eq!(p[0].value, loss);
    }
}
