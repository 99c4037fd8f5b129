//! The state machine against workers that are not processes, on a paused
//! clock: every wait is exact, nothing depends on this machine's speed.

use std::time::Duration;

use lavender::config::SupervisorConfig;
use lavender::status::PipelineState;
use nix::sys::signal::Signal;
use tokio::sync::mpsc::UnboundedReceiver;

use super::*;
use crate::pipeline::request::StartRequest;
use crate::process::fake::FakeBackend;

struct Harness {
    _dir: tempfile::TempDir,
    pipeline: PipelineHandle,
    fake: FakeBackend,
    alerts: UnboundedReceiver<Alert>,
}

fn harness(supervisor: impl FnOnce(&mut SupervisorConfig)) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().join("data"), None);
    layout.ensure_state_dir().unwrap();
    let mut config = Config {
        steps: vec![PipelineStep::Train],
        ..Config::default()
    };
    supervisor(&mut config.supervisor);
    let (tx, alerts) = mpsc::unbounded_channel();
    let fake = FakeBackend::default();
    let pipeline = spawn_with(layout, config, tx, Backend::fake(fake.clone())).expect("the actor");
    Harness {
        _dir: dir,
        pipeline,
        fake,
        alerts,
    }
}

impl Harness {
    async fn start(&self) {
        self.pipeline
            .start(StartRequest::default())
            .await
            .expect("started");
        assert_eq!(self.fake.launched(), [PipelineStep::Train]);
    }

    async fn wait_state(&self, state: PipelineState) -> PipelineRecord {
        self.pipeline
            .subscribe()
            .wait_for(|r| r.state == state)
            .await
            .expect("the actor runs")
            .clone()
    }

    /// The next alert the actor raised.
    async fn alert(&mut self) -> Alert {
        self.alerts.recv().await.expect("an alert")
    }

    /// Starts, ends the first worker with `outcome` and takes its "crashed" alert.
    async fn start_and_crash(&mut self, outcome: ExitOutcome) {
        self.start().await;
        self.fake.exit(0, outcome);
        self.wait_state(PipelineState::Crashed).await;
        assert!(matches!(self.alert().await, Alert::Crashed { .. }));
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[tokio::test(start_paused = true)]
async fn a_crash_restarts_after_its_backoff_and_the_next_waits_longer() {
    let mut h = harness(|s| {
        s.restart_backoff_s = vec![10.0, 30.0];
        s.max_restarts = 3;
    });
    h.start().await;
    h.fake.exit(0, ExitOutcome::Code(1));
    let record = h.wait_state(PipelineState::Crashed).await;
    assert!(record.restart_pending);
    assert_eq!(record.restarts, 1);
    match h.alert().await {
        Alert::Crashed {
            outcome,
            restart,
            restart_in,
            ..
        } => assert_eq!(
            (outcome, restart, restart_in),
            (ExitOutcome::Code(1), 1, secs(10.0))
        ),
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(secs(9.9)).await;
    assert_eq!(h.fake.launched().len(), 1, "restarted before the backoff");
    tokio::time::sleep(secs(0.2)).await;
    assert_eq!(h.fake.launched().len(), 2);
    assert_eq!(h.pipeline.record().state, PipelineState::Running);

    h.fake.exit(1, ExitOutcome::Signal(9));
    h.wait_state(PipelineState::Crashed).await;
    assert!(
        matches!(h.alert().await, Alert::Crashed { restart: 2, restart_in, .. } if restart_in == secs(30.0))
    );
    tokio::time::sleep(secs(29.9)).await;
    assert_eq!(h.fake.launched().len(), 2);
    tokio::time::sleep(secs(0.2)).await;
    assert_eq!(h.fake.launched().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn restarts_exhausted_fail_the_pipeline_with_the_last_exit() {
    let mut h = harness(|s| {
        s.restart_backoff_s = vec![1.0];
        s.max_restarts = 1;
    });
    h.start_and_crash(ExitOutcome::Code(3)).await;
    tokio::time::sleep(secs(1.1)).await;
    h.fake.exit(1, ExitOutcome::Code(4));
    let record = h.wait_state(PipelineState::Failed).await;
    assert!(!record.restart_pending);
    assert!(record.worker.is_none());
    match h.alert().await {
        Alert::Failed {
            restarts,
            last_exit,
            ..
        } => assert_eq!((restarts, last_exit), (1, Some(ExitOutcome::Code(4)))),
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(secs(60.0)).await;
    assert_eq!(h.fake.launched().len(), 2, "no restart after failing");
}

#[tokio::test(start_paused = true)]
async fn a_restart_that_cannot_start_fails_with_the_crash_exit() {
    let mut h = harness(|s| {
        s.restart_backoff_s = vec![1.0];
        s.max_restarts = 3;
    });
    h.start_and_crash(ExitOutcome::Signal(9)).await;
    h.fake.refuse_launches();
    tokio::time::sleep(secs(1.1)).await;
    let record = h.wait_state(PipelineState::Failed).await;
    assert!(!record.restart_pending);
    match h.alert().await {
        Alert::Failed {
            reason,
            restarts,
            last_exit,
            ..
        } => {
            assert_eq!((restarts, last_exit), (1, Some(ExitOutcome::Signal(9))));
            assert!(reason.contains("refused"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_long_healthy_run_starts_a_fresh_restart_count() {
    let mut h = harness(|s| {
        s.restart_backoff_s = vec![1.0, 50.0];
        s.max_restarts = 1;
        s.restart_reset_after_s = 60;
    });
    h.start_and_crash(ExitOutcome::Code(1)).await;
    tokio::time::sleep(secs(1.1)).await;
    assert_eq!(h.fake.launched().len(), 2);
    // The restarted worker trains for longer than restart_reset_after_s.
    tokio::time::sleep(secs(61.0)).await;
    h.fake.exit(1, ExitOutcome::Code(1));
    let record = h.wait_state(PipelineState::Crashed).await;
    assert_eq!(record.restarts, 1, "counted afresh, not failed");
    assert!(
        matches!(h.alert().await, Alert::Crashed { restart: 1, restart_in, .. } if restart_in == secs(1.0))
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_escalates_to_sigkill_after_the_timeout() {
    let h = harness(|_| {});
    h.fake.ignore_sigterm();
    h.start().await;
    let pipeline = h.pipeline.clone();
    let stop = tokio::spawn(async move { pipeline.stop(Some(secs(5.0))).await });
    h.wait_state(PipelineState::Stopping).await;
    tokio::time::sleep(secs(4.9)).await;
    assert_eq!(h.fake.signals(0), [Signal::SIGTERM]);
    tokio::time::sleep(secs(0.2)).await;
    assert_eq!(h.fake.signals(0), [Signal::SIGTERM, Signal::SIGKILL]);
    let report = stop.await.unwrap().expect("a report");
    assert!(report.killed && report.was_running, "{report:?}");
    assert_eq!(h.pipeline.record().state, PipelineState::Stopped);
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_saves_on_sigterm_stops_without_escalation() {
    let h = harness(|_| {});
    h.start().await;
    let report = h.pipeline.stop(Some(secs(5.0))).await.expect("a report");
    assert!(!report.killed, "{report:?}");
    assert_eq!(h.fake.signals(0), [Signal::SIGTERM]);
    let record = h.wait_state(PipelineState::Stopped).await;
    assert!(record.worker.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_the_backoff_cancels_the_restart() {
    let mut h = harness(|s| {
        s.restart_backoff_s = vec![10.0];
        s.max_restarts = 3;
    });
    h.start_and_crash(ExitOutcome::Code(1)).await;
    let report = h.pipeline.stop(None).await.expect("a report");
    assert!(
        report.message.starts_with("cancelled the pending restart"),
        "{report:?}"
    );
    tokio::time::sleep(secs(60.0)).await;
    assert_eq!(h.fake.launched().len(), 1, "restarted after the stop");
    assert_eq!(h.pipeline.record().state, PipelineState::Stopped);
}

/// Until `cond` holds, letting the actor and the blocking pool run.
async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_launch_leaves_the_actor_answering_and_a_stop_abandons_it() {
    let h = harness(|_| {});
    h.fake.hold_launches();
    let pipeline = h.pipeline.clone();
    let start = tokio::spawn(async move { pipeline.start(StartRequest::default()).await });
    until(|| h.fake.held_launches() == 1).await;

    // The launch is under way (a slow sbatch): the actor still answers.
    assert!(h.pipeline.ping().await, "the watchdog's ping is answered");
    let report = h.pipeline.stop(None).await.expect("a report");
    assert!(
        report.was_running && report.saved_checkpoint.is_none(),
        "{report:?}"
    );
    assert!(report.message.contains("being launched"), "{report:?}");
    assert_eq!(h.pipeline.record().state, PipelineState::Stopped);
    let reply = start.await.unwrap().expect("the start is answered");
    assert_eq!(reply.state, PipelineState::Stopped);

    // The launch returns: its worker is cancelled, never supervised.
    h.fake.release_launches();
    until(|| h.fake.signals(0) == [Signal::SIGKILL]).await;
    tokio::time::sleep(secs(1.0)).await;
    let record = h.pipeline.record();
    assert_eq!(record.state, PipelineState::Stopped);
    assert!(record.worker.is_none(), "{record:?}");

    // A new start launches afresh.
    h.pipeline
        .start(StartRequest::default())
        .await
        .expect("started again");
    assert_eq!(
        h.fake.launched(),
        [PipelineStep::Train, PipelineStep::Train]
    );
    assert_eq!(h.pipeline.record().state, PipelineState::Running);
}

#[tokio::test(start_paused = true)]
async fn a_detach_waits_for_the_launch_in_flight() {
    let h = harness(|_| {});
    h.fake.hold_launches();
    let pipeline = h.pipeline.clone();
    tokio::spawn(async move { pipeline.start(StartRequest::default()).await });
    until(|| h.fake.held_launches() == 1).await;
    let pipeline = h.pipeline.clone();
    let detach = tokio::spawn(async move { pipeline.detach().await });
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!detach.is_finished(), "detached before the launch returned");
    h.fake.release_launches();
    detach.await.unwrap();
    let record = h.pipeline.record();
    assert!(
        record.worker.is_some(),
        "the record names the worker left running: {record:?}"
    );
}
