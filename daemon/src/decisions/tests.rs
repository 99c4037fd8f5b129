use std::time::Duration;

use lavender::config::{LoggingConfig, PipelineStep};
use lavender::layout::Layout;

use super::*;

fn decision(kind: DecisionKind) -> Decision {
    Decision::new(
        kind,
        PipelineStep::Dedup,
        Evidence::default(),
        Rule::new("supervisor.max_restarts", 3),
        "did it",
    )
}

fn outcomes(layout: &Layout) -> Vec<Option<OutcomeKind>> {
    let (entries, skipped) = read(&path(layout)).unwrap();
    assert_eq!(skipped, 0);
    entries
        .iter()
        .map(|e| e.outcome.as_ref().map(|o| o.result))
        .collect()
}

/// An incident's decisions wait for their outcome: failed again once a worker
/// brought back ends in another decision, recovered when its step finishes, gave
/// up with the pipeline; a "would have" is settled at once.
#[test]
fn each_decision_of_an_incident_gets_the_incidents_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().to_path_buf(), None);
    let log = Decisions::open(&layout, LoggingConfig::default(), None);
    let poll = Duration::from_millis(10);
    log.record(decision(DecisionKind::HangKill));
    log.record(decision(DecisionKind::Restart));
    // No worker ran since: the restart belongs to the hang's incident.
    assert_eq!(outcomes(&layout), [None, None]);
    log.worker_running(PipelineStep::Dedup, None, None, poll);
    log.record(decision(DecisionKind::Restart));
    let failed = Some(OutcomeKind::FailedAgain);
    assert_eq!(outcomes(&layout), [failed, failed, None]);
    log.worker_running(PipelineStep::Dedup, None, None, poll);
    log.step_done(PipelineStep::Dedup);
    let recovered = Some(OutcomeKind::Recovered);
    assert_eq!(outcomes(&layout), [failed, failed, recovered]);
    // Nothing open: a finished step settles nothing more.
    log.step_done(PipelineStep::Dedup);
    assert_eq!(outcomes(&layout), [failed, failed, recovered]);
    log.record(decision(DecisionKind::Restart));
    log.record(decision(DecisionKind::GiveUp));
    let gave_up = Some(OutcomeKind::GaveUp);
    assert_eq!(
        outcomes(&layout),
        [failed, failed, recovered, gave_up, gave_up]
    );
    let mut would = decision(DecisionKind::Restart);
    would.mode = Mode::WouldHave;
    log.record(would);
    assert_eq!(outcomes(&layout)[5], Some(OutcomeKind::NotActed));
}

/// The log rotates like the logs; reading it goes back across its rotated files,
/// and a torn line is skipped and counted.
#[test]
fn the_log_rotates_and_is_read_back_across_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().to_path_buf(), None);
    let limits = LoggingConfig {
        max_bytes: 1024,
        keep: 9,
    };
    let log = Decisions::open(&layout, limits, None);
    let ids: Vec<String> = (0..12)
        .map(|_| log.record(decision(DecisionKind::Restart)))
        .collect();
    let file = path(&layout);
    assert!(crate::logs::rotating::rotated(&file, 1).exists(), "rotated");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"record\":\"deci"))
        .unwrap();
    let (entries, skipped) = read(&file).unwrap();
    assert_eq!(skipped, 1);
    let read_ids: Vec<&str> = entries.iter().map(|e| e.decision.id.as_str()).collect();
    assert_eq!(read_ids, ids, "all, oldest first");
}

/// An incident settled without a push of its own (an operator's stop, its data
/// step finishing) tells the alert sink, whose push gate would otherwise stay
/// shut for the next failure; with no incident open there is nothing to tell.
#[test]
fn an_incident_stopped_or_recovered_by_its_step_tells_the_sink_it_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().to_path_buf(), None);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let log = Decisions::open(&layout, LoggingConfig::default(), Some(tx));
    log.stopped();
    log.step_done(PipelineStep::Dedup);
    assert!(rx.try_recv().is_err(), "no incident, nothing closed");
    log.record(decision(DecisionKind::Restart));
    log.stopped();
    match rx.try_recv() {
        Ok(Alert::IncidentClosed { text }) => assert!(text.starts_with("stopped at "), "{text}"),
        other => panic!("{other:?}"),
    }
    log.record(decision(DecisionKind::Restart));
    log.worker_running(PipelineStep::Dedup, None, None, Duration::from_millis(10));
    log.step_done(PipelineStep::Dedup);
    match rx.try_recv() {
        Ok(Alert::IncidentClosed { text }) => {
            assert!(text.starts_with("step dedup finished at "), "{text}")
        }
        other => panic!("{other:?}"),
    }
    assert!(rx.try_recv().is_err());
}
