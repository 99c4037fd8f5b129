//! What one pass gives a tracker, from the run's files: a table of situations.

use std::path::Path;

use lavender::config::Config;
use lavender::status::PipelineState;
use lavender::tracking::Progress;

use super::{Seen, gather};

const RUN: &str = "run-2026-01-02_03-04-05";

fn seen(run_dir: &Path, state: PipelineState, step: u64) -> Seen {
    Seen {
        run_dir: run_dir.to_path_buf(),
        state,
        step: Some(step),
        steps_per_sec: None,
        replication_behind: false,
    }
}

fn record(run_dir: &Path, steps: std::ops::RangeInclusive<u64>) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join(lavender::log_history::SIDECAR))
        .unwrap();
    for s in steps {
        writeln!(
            f,
            r#"{{"step":{s},"loss":{},"stage":"pretrain"}}"#,
            10.0 / s as f64
        )
        .unwrap();
    }
}

fn loss_steps(b: &super::Batch) -> Vec<u64> {
    b.points
        .iter()
        .filter(|p| p.key == "loss")
        .map(|p| p.step)
        .collect()
}

#[test]
fn a_pass_gives_each_step_once_the_events_since_the_lineage_began_and_the_end() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let run_dir = root.path().join(RUN);
    std::fs::create_dir_all(&run_dir).unwrap();
    let config = Config::default();
    // A decision from before the lineage began, and one after.
    std::fs::write(
        state.join("decisions.jsonl"),
        concat!(
            r#"{"record":"decision","id":"a-1-1","at":"2026-01-01T00:00:00.000Z","kind":"restart","step":"train","mode":"acted","saw":{},"rule":{"key":"k","value":1},"did":"an older lineage's"}"#,
            "\n",
            r#"{"record":"decision","id":"b-1-2","at":"2026-01-02T03:05:00.000Z","kind":"restart","step":"train","mode":"acted","saw":{"last_step":7},"rule":{"key":"k","value":1},"did":"restart 1 of 3"}"#,
            "\n",
            "not json\n",
        ),
    )
    .unwrap();
    record(&run_dir, 1..=10);

    // 1. The first pass: steps 1..=10, the config as params, the one restart of
    //    this lineage.
    let b = gather(
        &state,
        &config,
        RUN,
        &seen(&run_dir, PipelineState::Running, 10),
        &Progress::default(),
        true,
    );
    assert_eq!(loss_steps(&b), (1..=10).collect::<Vec<_>>());
    assert!(
        b.params
            .iter()
            .any(|(k, v)| k == "training.keep_checkpoints" && v == "3"),
        "{:?}",
        b.params
    );
    let texts: Vec<&str> = b.events.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(texts, ["restart: restart 1 of 3"]);
    assert_eq!(b.events[0].step, 7);
    assert_eq!(b.status, None, "a run made RUNNING is not told so again");
    let progress = b.next;

    // 2. A crash restart from step 5 replays 6..=10 (the record cut back and
    //    written anew), then trains 11..=12: only 11 and 12 are new.
    std::fs::remove_file(run_dir.join(lavender::log_history::SIDECAR)).unwrap();
    record(&run_dir, 1..=12);
    let b = gather(
        &state,
        &config,
        RUN,
        &seen(&run_dir, PipelineState::Running, 12),
        &progress,
        true,
    );
    assert_eq!(loss_steps(&b), [11, 12]);
    assert!(b.events.is_empty() && b.params.is_empty(), "{:?}", b.events);
    let progress = b.next;

    // 3. A rollback to step 8: 9.. retrained are new values, logged again.
    lavender::skips::append(
        &run_dir,
        lavender::skips::SkipRange {
            from_step: 8,
            to_step: 12,
            checkpoint: "pretrain-8".into(),
            reason: "loss spike".into(),
            at: "2026-01-02T03:06:00Z".into(),
        },
    )
    .unwrap();
    record(&run_dir, 9..=13);
    let b = gather(
        &state,
        &config,
        RUN,
        &seen(&run_dir, PipelineState::Running, 13),
        &progress,
        true,
    );
    assert_eq!(loss_steps(&b), (9..=13).collect::<Vec<_>>());
    let progress = b.next;

    // 4. A changed config: a tag, not a param (MLflow's cannot change).
    let mut changed = config.clone();
    changed.training.keep_checkpoints = 5;
    let b = gather(
        &state,
        &changed,
        RUN,
        &seen(&run_dir, PipelineState::Running, 13),
        &progress,
        true,
    );
    assert!(b.params.is_empty());
    assert_eq!(
        b.tags,
        [(
            "lavender.config_change.0001".to_string(),
            "training.keep_checkpoints: 3 -> 5".to_string()
        )]
    );
    let progress = b.next;

    // 5. The worker reports its own metrics: none from the daemon. The end.
    record(&run_dir, 14..=15);
    let b = gather(
        &state,
        &changed,
        RUN,
        &seen(&run_dir, PipelineState::Finished, 15),
        &progress,
        false,
    );
    assert!(loss_steps(&b).is_empty());
    assert_eq!(b.status.as_deref(), Some("FINISHED"));
    assert_eq!(b.events.last().map(|e| e.text.as_str()), Some("finished"));
    // Told once.
    let again = gather(
        &state,
        &changed,
        RUN,
        &seen(&run_dir, PipelineState::Finished, 15),
        &b.next,
        false,
    );
    assert!(again.is_empty(), "{:?}", again.events);
}

#[test]
fn a_long_backlog_goes_in_batches_and_the_end_after_it() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let run_dir = root.path().join(RUN);
    std::fs::create_dir_all(&run_dir).unwrap();
    let config = Config::default();
    record(&run_dir, 1..=2500);
    let end = seen(&run_dir, PipelineState::Finished, 2500);
    let b = gather(&state, &config, RUN, &end, &Progress::default(), true);
    assert_eq!(
        loss_steps(&b),
        (1..=super::MAX_POINTS_PER_PASS as u64).collect::<Vec<_>>()
    );
    assert_eq!(b.status, None, "the end waits for the rest of the record");
    let b = gather(&state, &config, RUN, &end, &b.next, true);
    assert_eq!(
        loss_steps(&b),
        (super::MAX_POINTS_PER_PASS as u64 + 1..=2500).collect::<Vec<_>>()
    );
    assert_eq!(b.status.as_deref(), Some("FINISHED"));
}
