use super::*;
use proptest::prelude::*;
use serde_json::json;

fn values(step: u64, loss: f64) -> TrainStepValues {
    TrainStepValues {
        step,
        stage: Some("pretrain".into()),
        loss: Some(loss),
        grad_norm: Some(1.0),
        learning_rate: Some(0.1),
        window: None,
    }
}

/// A complete-enough checkpoint of `run` at `step` (its trainer state only).
fn checkpoint_at(run: &Path, step: u64) -> std::path::PathBuf {
    let ck = run.join(format!("checkpoint-pretrain-{step}"));
    std::fs::create_dir_all(&ck).unwrap();
    std::fs::write(
        ck.join("trainer_state.json"),
        json!({"global_step": step}).to_string(),
    )
    .unwrap();
    ck
}

#[test]
fn a_line_is_a_step_entry_or_nothing() {
    let table: &[(&str, Option<TrainStepValues>)] = &[
        (
            r#"{"step": 3, "loss": 2.5, "grad_norm": 1.0, "learning_rate": 0.1, "stage": "pretrain"}"#,
            Some(values(3, 2.5)),
        ),
        // JSON has no NaN: the writers write null.
        (
            r#"{"step": 4, "loss": null}"#,
            Some(TrainStepValues {
                step: 4,
                stage: None,
                loss: None,
                grad_norm: None,
                learning_rate: None,
                window: None,
            }),
        ),
        // An evaluation, a torn line, a negative step, a string loss, a long stage.
        (r#"{"step": 4, "eval_loss": 2.0}"#, None),
        (r#"{"step": 4, "lo"#, None),
        (r#"{"step": -1, "loss": 1.0}"#, None),
        (r#"{"step": 1, "loss": "1.0"}"#, None),
        (r#"[1, 2]"#, None),
        ("", None),
    ];
    for (line, want) in table {
        assert_eq!(&TrainStepValues::parse(line), want, "{line}");
    }
    let long = format!(
        r#"{{"step": 1, "loss": 1.0, "stage": "{}"}}"#,
        "x".repeat(65)
    );
    assert_eq!(TrainStepValues::parse(&long), None);
}

#[test]
fn the_tolerance_is_bits_or_relative_and_a_missing_value_is_a_difference() {
    let exact = Tolerance::Exact;
    assert!(exact.agrees(Some(1.0), Some(1.0)));
    assert!(!exact.agrees(Some(1.0), Some(1.0 + f64::EPSILON)));
    assert!(exact.agrees(None, None));
    assert!(!exact.agrees(Some(1.0), None));
    let rel = Tolerance::Relative(0.01);
    assert!(rel.agrees(Some(100.0), Some(100.9)));
    assert!(!rel.agrees(Some(100.0), Some(101.2)));
    assert!(rel.agrees(Some(0.0), Some(0.0)));
    assert_eq!(relative_difference(Some(2.0), Some(1.0)), 0.5);
    assert_eq!(relative_difference(Some(1.0), None), 1.0);
}

#[test]
fn a_replay_checks_each_kept_step_once_and_names_the_first_that_differs() {
    let record = (1..=10).map(|s| values(s, 1.0 / s as f64));
    let mut r = Replay::new("run", "ck-5", 5, Tolerance::Exact, record);
    assert_eq!(
        r.expected.keys().copied().collect::<Vec<_>>(),
        [6, 7, 8, 9, 10]
    );
    assert_eq!(r.verdict, Verdict::Checking);
    // Steps up to the checkpoint are not replays; a step twice is checked once.
    assert!(r.observe(&values(5, 9.0)).is_none());
    assert!(r.observe(&values(6, 1.0 / 6.0)).is_none());
    assert!(r.observe(&values(6, 9.0)).is_none());
    assert_eq!(r.checked, 1);
    let m = r.observe(&values(7, 0.5)).cloned().unwrap();
    assert_eq!(m.step, 7);
    assert_eq!(m.key, "loss");
    assert_eq!(m.first, Some(1.0 / 7.0));
    assert_eq!(m.again, Some(0.5));
    assert_eq!(r.verdict, Verdict::Mismatch);
    assert!(r.status().mismatch.unwrap().starts_with("step 7 loss"));
    // After the first, nothing more is compared.
    assert!(r.observe(&values(8, 0.5)).is_none());
}

#[test]
fn a_replay_passes_when_every_step_agrees_and_is_incomplete_when_the_worker_ends_first() {
    let record = || (1..=8).map(|s| values(s, s as f64));
    let mut r = Replay::new("run", "ck", 6, Tolerance::Exact, record());
    r.observe(&values(7, 7.0));
    r.observe(&values(8, 8.0));
    assert_eq!(r.verdict, Verdict::Passed);
    assert_eq!(r.status().steps_checked, 2);

    let mut r = Replay::new("run", "ck", 6, Tolerance::Exact, record());
    r.observe(&values(7, 7.0));
    r.ended();
    assert_eq!(r.verdict, Verdict::Incomplete);

    // The gradient norm and the rate count only where both passes report them.
    let mut r = Replay::new("run", "ck", 6, Tolerance::Exact, record());
    let mut no_norm = values(7, 7.0);
    no_norm.grad_norm = None;
    assert!(r.observe(&no_norm).is_none());
    let mut other_rate = values(8, 8.0);
    other_rate.learning_rate = Some(0.2);
    assert_eq!(r.observe(&other_rate).unwrap().key, "learning_rate");
}

#[test]
fn read_from_takes_whole_lines_and_starts_over_on_a_shorter_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log_history.jsonl");
    assert_eq!(read_from(&path, 0).unwrap(), (vec![], 0));
    std::fs::write(&path, "{\"step\": 1, \"loss\": 1.0}\n{\"step\": 2, \"lo").unwrap();
    let (steps, offset) = read_from(&path, 0).unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(offset, 25);
    let (steps, same) = read_from(&path, offset).unwrap();
    assert!(steps.is_empty());
    assert_eq!(same, offset);
    std::fs::write(&path, "{\"step\": 9, \"loss\": 1.0}\n").unwrap();
    let (steps, _) = read_from(&path, 1000).unwrap();
    assert_eq!(steps[0].step, 9);
}

#[test]
fn keep_saves_the_steps_past_the_checkpoint_and_cuts_the_record_back() {
    let data = tempfile::tempdir().unwrap();
    let state = data.path().join("state");
    let run = data.path().join("run-2026-01-01_00-00-00");
    let ck = checkpoint_at(&run, 5);
    let mut text = String::new();
    for s in 1..=8u64 {
        text.push_str(&format!("{{\"step\": {s}, \"loss\": {s}.5}}\n"));
    }
    text.push_str("{\"step\": 8, \"eval_loss\": 1.0}\n{\"step\": 9, \"lo");
    std::fs::write(run.join(crate::log_history::SIDECAR), &text).unwrap();

    let kept = keep(&state, &run, &ck, Tolerance::Exact).unwrap().unwrap();
    assert_eq!(kept.expected.keys().copied().collect::<Vec<_>>(), [6, 7, 8]);
    assert_eq!(
        Replay::read(&state, "run-2026-01-01_00-00-00").unwrap(),
        kept
    );
    let left = std::fs::read_to_string(run.join(crate::log_history::SIDECAR)).unwrap();
    assert_eq!(left.lines().count(), 5, "{left}");
    assert!(left.ends_with("{\"step\": 5, \"loss\": 5.5}\n"));

    // The worker gone before it replayed them: the next resume from the same
    // checkpoint compares the same steps.
    let again = keep(&state, &run, &ck, Tolerance::Exact).unwrap().unwrap();
    assert_eq!(again.expected, kept.expected);
}

#[test]
fn a_rollback_range_from_the_checkpoint_is_new_data_not_a_replay() {
    let data = tempfile::tempdir().unwrap();
    let run = data.path().join("run-2026-01-01_00-00-00");
    let ck = checkpoint_at(&run, 5);
    std::fs::write(
        run.join(crate::log_history::SIDECAR),
        "{\"step\": 6, \"loss\": 1.0}\n",
    )
    .unwrap();
    crate::skips::append(
        &run,
        crate::skips::SkipRange {
            from_step: 5,
            to_step: 6,
            checkpoint: "checkpoint-pretrain-5".into(),
            reason: "spike".into(),
            at: "2026-01-01T00:00:00Z".into(),
        },
    )
    .unwrap();
    assert!(
        keep(&data.path().join("state"), &run, &ck, Tolerance::Exact)
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_run_name_that_is_not_a_plain_file_name_has_no_path() {
    let state = Path::new("/s");
    assert!(path(state, "run-2026-01-01_00-00-00").is_some());
    for bad in ["", "..", ".hidden", "a/b", "../x", "a b"] {
        assert!(path(state, bad).is_none(), "{bad}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any bytes: the parser answers (no panic), and a parsed entry has its step.
    #[test]
    fn any_line_parses_or_is_skipped(line in ".{0,200}") {
        if let Some(v) = TrainStepValues::parse(&line) {
            prop_assert!(line.contains("step"));
            let _ = v;
        }
    }

    /// A record of any bytes is read without a panic, and the offset never passes
    /// its end.
    #[test]
    fn any_record_reads(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        std::fs::write(&path, &bytes).unwrap();
        let (_, offset) = read_from(&path, 0).unwrap();
        prop_assert!(offset <= bytes.len() as u64);
        cut_back(&path, 3).unwrap();
    }

    /// The same values replayed always pass, exactly.
    #[test]
    fn the_same_values_always_pass(losses in proptest::collection::vec(-1e6f64..1e6, 1..50), from in 0usize..50) {
        let record: Vec<_> = losses.iter().enumerate().map(|(i, l)| values(i as u64 + 1, *l)).collect();
        let mut r = Replay::new("run", "ck", from as u64, Tolerance::Exact, record.clone());
        for v in &record {
            prop_assert!(r.observe(v).is_none());
        }
        prop_assert_eq!(r.verdict, Verdict::Passed);
    }
}

#[test]
fn a_replay_cut_short_hands_its_unchecked_steps_to_the_next_resume() {
    let data = tempfile::tempdir().unwrap();
    let state = data.path().join("state");
    let run = data.path().join("run-2026-01-01_00-00-00");
    let checkpoint = |step: u64| checkpoint_at(&run, step);
    let record = |steps: std::ops::RangeInclusive<u64>| {
        let text: String = steps
            .map(|s| format!("{{\"step\": {s}, \"loss\": {s}.25}}\n"))
            .collect();
        std::fs::write(run.join(crate::log_history::SIDECAR), text).unwrap();
    };
    // The first pass got to 10; a resume from 5 replayed 6 and 7, then stopped with
    // a checkpoint at 7.
    std::fs::create_dir_all(&run).unwrap();
    record(1..=10);
    let first = keep(&state, &run, &checkpoint(5), Tolerance::Exact)
        .unwrap()
        .unwrap();
    let mut r = first.clone();
    r.observe(&TrainStepValues::parse(r#"{"step": 6, "loss": 6.25}"#).unwrap());
    r.observe(&TrainStepValues::parse(r#"{"step": 7, "loss": 7.25}"#).unwrap());
    r.ended();
    r.write(&state).unwrap();
    record(1..=7);
    let next = keep(&state, &run, &checkpoint(7), Tolerance::Exact)
        .unwrap()
        .unwrap();
    assert_eq!(
        next.expected.keys().copied().collect::<Vec<_>>(),
        [8, 9, 10]
    );
    assert_eq!(next.status().steps_checked, 2);
    assert_eq!(next.verdict, Verdict::Checking);
}

#[test]
fn a_logging_window_compares_only_with_the_same_window_inside_the_replay() {
    let mean = |step: u64, window: u64, loss: f64| TrainStepValues {
        window: Some(window),
        ..values(step, loss)
    };
    // Windows of 5 in the first pass; the checkpoint at 12 splits the one ending at
    // 15; the replay logs 13-15 as a window of 3, then 16-20 as the first pass did.
    let record = [mean(10, 5, 1.0), mean(15, 5, 2.0), mean(20, 5, 3.0)];
    let mut r = Replay::new("run", "ck", 12, Tolerance::Exact, record);
    assert!(r.observe(&mean(15, 3, 9.0)).is_none());
    assert_eq!(r.checked, 0);
    assert!(r.observe(&mean(20, 5, 3.0)).is_none());
    assert_eq!((r.checked, r.verdict), (1, Verdict::Passed));
    let mut r = Replay::new("run", "ck", 10, Tolerance::Exact, [mean(15, 5, 2.0)]);
    assert_eq!(r.observe(&mean(15, 5, 2.5)).unwrap().step, 15);
    assert_eq!(
        TrainStepValues::parse(r#"{"step": 3, "loss": 1.0, "window": 4}"#),
        None
    );
}
