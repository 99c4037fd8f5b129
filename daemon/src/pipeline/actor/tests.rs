//! The state machine against workers that are not processes, on a paused
//! clock: every wait is exact, nothing depends on this machine's speed.

use std::time::Duration;

use lavender::config::SupervisorConfig;
use lavender::failure::FailureKind;
use lavender::heartbeat::WorkerState;
use lavender::status::{PipelineState, RecoveryReason, StepState};
use nix::sys::signal::Signal;
use tokio::sync::mpsc::UnboundedReceiver;

use super::*;
use crate::pipeline::handle::HungReport;
use crate::process::ProcessIdentity;
use crate::process::fake::FakeBackend;
use lavender::pipeline_file::StartRequest;
use lavender::pipeline_file::{RecordState, StepEntry, StopCause};

struct Harness {
    _dir: tempfile::TempDir,
    pipeline: PipelineHandle,
    fake: FakeBackend,
    alerts: UnboundedReceiver<Alert>,
}

fn harness(supervisor: impl FnOnce(&mut SupervisorConfig)) -> Harness {
    harness_after(None, supervisor)
}

/// An actor started on a data root whose `state/pipeline.json` is `saved` (what
/// the previous daemon left).
fn harness_after(
    saved: Option<PipelineRecord>,
    supervisor: impl FnOnce(&mut SupervisorConfig),
) -> Harness {
    let mut config = Config {
        steps: vec![PipelineStep::Train],
        ..Config::default()
    };
    supervisor(&mut config.supervisor);
    harness_of(saved, config)
}

/// An actor with `config` on a data root whose `state/pipeline.json` is `saved`.
fn harness_of(saved: Option<PipelineRecord>, config: Config) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().join("data"), None);
    layout.ensure_state_dir().unwrap();
    if let Some(mut record) = saved {
        record.save(&layout).unwrap();
    }
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

    async fn wait_for(&self, what: impl Fn(&PipelineRecord) -> bool) -> PipelineRecord {
        self.pipeline
            .subscribe()
            .wait_for(what)
            .await
            .expect("the actor runs")
            .clone()
    }

    async fn wait_state(&self, state: PipelineState) -> PipelineRecord {
        self.wait_for(|r| r.state.kind() == state).await
    }

    /// Waits until restart `n` is running.
    async fn wait_restarted(&self, n: u32) -> PipelineRecord {
        self.wait_for(|r| r.state.kind() == PipelineState::Running && r.restarts == n)
            .await
    }

    /// The next alert the actor raised.
    async fn alert(&mut self) -> Alert {
        self.alerts.recv().await.expect("an alert")
    }

    fn worker(&self) -> WorkerHandle {
        self.pipeline
            .record()
            .worker()
            .cloned()
            .expect("a worker runs")
            .handle
    }

    fn hung(&self, worker: WorkerHandle, step: u64, stalled_for: f64) -> bool {
        self.pipeline.report_hung(HungReport {
            worker,
            phase: WorkerState::Training,
            step: Some(step),
            stalled_for: secs(stalled_for),
            allowance: secs(60.0),
            allowance_key: "supervisor.stale_after_s",
            work: PipelineStep::Train,
        })
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[tokio::test(start_paused = true)]
async fn a_crash_restarts_at_once_then_after_the_backoff() {
    let mut h = harness(|s| {
        s.restart_backoff_s = vec![10.0, 30.0];
        s.max_restarts = 3;
        s.max_no_progress_restarts = 9;
    });
    h.start().await;
    h.fake.exit(0, ExitOutcome::Code(1));
    match h.alert().await {
        Alert::Crashed {
            outcome,
            failure,
            restart,
            restart_in,
            ..
        } => {
            assert_eq!(
                (outcome, restart, restart_in),
                (ExitOutcome::Code(1), 1, Duration::ZERO)
            );
            assert_eq!(failure.kind, FailureKind::Crash);
        }
        other => panic!("{other:?}"),
    }
    let record = h.wait_restarted(1).await;
    assert_eq!(h.fake.launched().len(), 2);
    assert_eq!(record.recovery.unwrap().reason, RecoveryReason::Failed);

    h.fake.exit(1, ExitOutcome::Signal(9));
    let record = h.wait_state(PipelineState::Crashed).await;
    assert!(record.restart_pending());
    assert!(
        matches!(h.alert().await, Alert::Crashed { restart: 2, restart_in, .. } if restart_in == secs(10.0))
    );
    tokio::time::sleep(secs(9.9)).await;
    assert_eq!(h.fake.launched().len(), 2, "restarted before the backoff");
    tokio::time::sleep(secs(0.2)).await;
    assert_eq!(h.fake.launched().len(), 3);
    h.fake.exit(2, ExitOutcome::Code(1));
    assert!(
        matches!(h.alert().await, Alert::Crashed { restart: 3, restart_in, .. } if restart_in == secs(30.0))
    );
}

#[tokio::test(start_paused = true)]
async fn restarts_exhausted_fail_the_pipeline_with_the_last_exit() {
    let mut h = harness(|s| {
        s.restart_backoff_s = vec![1.0];
        s.max_restarts = 1;
    });
    h.start().await;
    h.fake.exit(0, ExitOutcome::Code(3));
    assert!(matches!(h.alert().await, Alert::Crashed { .. }));
    h.wait_restarted(1).await;
    h.fake.exit(1, ExitOutcome::Code(4));
    let record = h.wait_state(PipelineState::Failed).await;
    assert!(!record.restart_pending());
    assert!(record.worker().is_none());
    match h.alert().await {
        Alert::Failed {
            restarts,
            last_exit,
            reason,
            ..
        } => {
            assert_eq!((restarts, last_exit), (1, Some(ExitOutcome::Code(4))));
            assert!(reason.contains("supervisor.max_restarts"), "{reason}");
        }
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
    h.start().await;
    h.fake.refuse_launches();
    h.fake.exit(0, ExitOutcome::Signal(9));
    assert!(matches!(h.alert().await, Alert::Crashed { .. }));
    let record = h.wait_state(PipelineState::Failed).await;
    assert!(!record.restart_pending());
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
        s.restart_backoff_s = vec![50.0];
        s.max_restarts = 1;
        s.restart_reset_after_s = 60;
    });
    h.start().await;
    h.fake.exit(0, ExitOutcome::Code(1));
    assert!(matches!(h.alert().await, Alert::Crashed { .. }));
    h.wait_restarted(1).await;
    // The restarted worker trains for longer than restart_reset_after_s.
    tokio::time::sleep(secs(61.0)).await;
    h.fake.exit(1, ExitOutcome::Code(1));
    assert!(
        matches!(h.alert().await, Alert::Crashed { restart: 1, restart_in, .. } if restart_in.is_zero()),
        "counted afresh, not failed"
    );
    h.wait_for(|r| h.fake.launched().len() == 3 && r.state.kind() == PipelineState::Running)
        .await;
}

/// A config the worker rejects, a checkpoint that does not fit, missing data: a
/// restart would fail the same way, so the pipeline fails at once, saying why and
/// what to do, with one alert.
#[tokio::test(start_paused = true)]
async fn a_failure_that_will_repeat_fails_at_once_with_the_cause_and_the_fix() {
    for kind in [
        FailureKind::Config,
        FailureKind::IncompatibleCheckpoint,
        FailureKind::Data,
    ] {
        let mut h = harness(|_| {});
        h.start().await;
        h.fake.exit(0, ExitOutcome::Code(kind.exit_code()));
        let record = h.wait_state(PipelineState::Failed).await;
        assert_eq!(record.restarts, 0);
        assert_eq!(record.failure.as_ref().map(|f| f.kind), Some(kind));
        match h.alert().await {
            Alert::Failed {
                reason, failure, ..
            } => {
                assert!(reason.contains("to fix:"), "{kind}: {reason}");
                assert_eq!(failure.map(|f| f.kind), Some(kind));
            }
            other => panic!("{kind}: {other:?}"),
        }
        tokio::time::sleep(secs(600.0)).await;
        assert_eq!(h.fake.launched().len(), 1, "{kind}: restarted");
        assert!(h.alerts.try_recv().is_err(), "{kind}: one alert only");
    }
}

/// A complete checkpoint of `step` in `run`.
fn save_checkpoint(run: &std::path::Path, name: &str, step: u64) {
    let dir = run.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let state = lavender::trainer_state::TrainerState::new("pretrain", step);
    lavender::trainer_state::write(&dir, &state).unwrap();
}

/// A worker that cannot load its checkpoint (`damaged_checkpoint`) has it set aside
/// and is relaunched at once from the one before, not as a crash restart; a
/// checkpoint that does not match its manifest is set aside before a launch takes
/// it; with nothing intact left, the pipeline fails naming each one.
#[tokio::test(start_paused = true)]
async fn a_damaged_checkpoint_is_set_aside_and_the_worker_relaunched_at_once_from_the_one_before() {
    use lavender::checkpoint::contents::{self, ContentManifest, FileEntry, HashAlgorithm};
    let mut h = harness(|_| {});
    h.start().await;
    let run = h.pipeline.record().run_dir.expect("a run directory");
    for (i, name) in [
        "pretrain-00-00-01-0001",
        "pretrain-00-00-02-0002",
        "pretrain-00-00-03-0003",
    ]
    .iter()
    .enumerate()
    {
        save_checkpoint(&run, name, 10 * (i as u64 + 1));
    }
    // The newest lists a file it does not hold: set aside before the restart takes it.
    let torn = ContentManifest::new(
        HashAlgorithm::Blake3,
        vec![FileEntry {
            path: "model.safetensors".into(),
            size: 8,
            hash: "00".into(),
        }],
    );
    contents::write(&run.join("pretrain-00-00-03-0003"), &torn).unwrap();
    h.fake.exit(0, ExitOutcome::Signal(9));
    assert!(matches!(h.alert().await, Alert::Crashed { .. }));
    match h.alert().await {
        Alert::CheckpointDamaged { message, .. } => assert!(
            message.starts_with("checkpoint pretrain-00-00-03-0003 is damaged (model.safetensors: missing); set aside as ")
                && message.ends_with("; resuming from pretrain-00-00-02-0002"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    let record = h.wait_restarted(1).await;
    let from = |r: &PipelineRecord| r.recovery.as_ref().and_then(|r| r.checkpoint.clone());
    assert_eq!(from(&record).as_deref(), Some("pretrain-00-00-02-0002"));
    assert!(run.join("damaged/pretrain-00-00-03-0003").is_dir());

    // The worker cannot load 0002 (no manifest, so not caught before): set aside, and
    // relaunched at once from 0001, the restart count as it was.
    h.fake.exit(
        1,
        ExitOutcome::Code(FailureKind::DamagedCheckpoint.exit_code()),
    );
    assert!(matches!(h.alert().await, Alert::CheckpointDamaged { .. }));
    let record = h
        .wait_for(|r| r.state.kind() == PipelineState::Running && h.fake.launched().len() == 3)
        .await;
    assert_eq!(record.restarts, 1, "a fallback is not a crash restart");
    assert_eq!(from(&record).as_deref(), Some("pretrain-00-00-01-0001"));
    assert!(run.join("damaged/pretrain-00-00-02-0002").is_dir());

    // 0001 too: nothing is left, the pipeline fails naming it.
    h.fake.exit(
        2,
        ExitOutcome::Code(FailureKind::DamagedCheckpoint.exit_code()),
    );
    let record = h.wait_state(PipelineState::Failed).await;
    let error = record.last_error.unwrap_or_default();
    assert!(
        error.contains("no intact checkpoint is left to resume from: checkpoint pretrain-00-00-01-0001 is damaged"),
        "{error}"
    );
    assert_eq!(h.fake.launched().len(), 3);
}

/// A worker that says `damaged_checkpoint` about a checkpoint whose bytes match its
/// manifest (a data file it could not read while loading, say) keeps the checkpoint:
/// the policy restarts it from the same one, counted as a restart.
#[tokio::test(start_paused = true)]
async fn a_damaged_claim_about_a_checkpoint_that_verifies_is_a_counted_restart() {
    use lavender::checkpoint::contents::{self, HashAlgorithm};
    let mut h = harness(|_| {});
    h.start().await;
    let run = h.pipeline.record().run_dir.expect("a run directory");
    let name = "pretrain-00-00-01-0001";
    save_checkpoint(&run, name, 10);
    let dir = run.join(name);
    std::fs::write(dir.join("model.safetensors"), b"weights").unwrap();
    contents::write(
        &dir,
        &contents::build_from_disk(&dir, HashAlgorithm::Blake3).unwrap(),
    )
    .unwrap();
    h.fake.exit(0, ExitOutcome::Signal(9));
    assert!(matches!(h.alert().await, Alert::Crashed { .. }));
    h.wait_restarted(1).await;
    h.fake.exit(
        1,
        ExitOutcome::Code(FailureKind::DamagedCheckpoint.exit_code()),
    );
    assert!(matches!(h.alert().await, Alert::Crashed { .. }));
    let record = h.wait_restarted(2).await;
    let from = record.recovery.as_ref().and_then(|r| r.checkpoint.clone());
    assert_eq!(from.as_deref(), Some(name));
    assert!(dir.join("model.safetensors").is_file());
    assert!(!run.join("damaged").exists());
}

/// Observe mode sets nothing aside: a worker that cannot load the checkpoint it
/// was started from leaves it where it is, and the daemon only writes down what it
/// would have done.
#[tokio::test(start_paused = true)]
async fn in_observe_mode_a_damaged_checkpoint_is_left_where_it_is() {
    let h = harness(|s| s.mode = lavender::config::SupervisorMode::Observe);
    let run = h
        ._dir
        .path()
        .join("data/checkpoints/run-2026-01-01_00-00-00");
    save_checkpoint(&run, "pretrain-00-00-01-0001", 10);
    let ckpt = run.join("pretrain-00-00-01-0001");
    h.pipeline
        .start(StartRequest {
            resume: Some(ckpt.display().to_string()),
            ..StartRequest::default()
        })
        .await
        .expect("started");
    h.fake.exit(
        0,
        ExitOutcome::Code(FailureKind::DamagedCheckpoint.exit_code()),
    );
    let record = h
        .wait_for(|r| r.state.kind() != PipelineState::Running)
        .await;
    tokio::time::sleep(secs(30.0)).await;
    assert!(ckpt.is_dir(), "{record:?}");
    assert!(!run.join("damaged").exists());
    assert!(
        !h.pipeline
            .record()
            .run_dir
            .is_some_and(|r| r.join("damaged").exists())
    );
    assert_eq!(h.fake.launched().len(), 1);
}

/// `pretrain-00-00-01-0001` and `-0002` (steps 10 and 20, completed in that order) in
/// `run`, each with its weights and a manifest.
fn two_checkpoints_with_manifests(run: &std::path::Path) {
    use lavender::checkpoint::contents::{self, HashAlgorithm};
    for (i, name) in ["pretrain-00-00-01-0001", "pretrain-00-00-02-0002"]
        .iter()
        .enumerate()
    {
        save_checkpoint(run, name, 10 * (i as u64 + 1));
        let dir = run.join(name);
        std::fs::write(dir.join("model.safetensors"), b"weights").unwrap();
        let m = contents::build_from_disk(&dir, HashAlgorithm::Blake3).unwrap();
        contents::write(&dir, &m).unwrap();
        let when = std::time::UNIX_EPOCH + Duration::from_secs(1_000 * (i as u64 + 1));
        std::fs::File::options()
            .write(true)
            .open(dir.join("trainer_state.json"))
            .and_then(|f| f.set_modified(when))
            .unwrap();
    }
}

/// Observe mode moves nothing before a launch either: `start --resume latest` with a
/// newest checkpoint whose weights no longer match its manifest leaves it where it
/// is, resumes from the one before, and writes the set-aside down as would-have.
#[tokio::test(start_paused = true)]
async fn in_observe_mode_the_pre_launch_check_leaves_a_damaged_checkpoint_in_place() {
    let mut h = harness(|s| s.mode = lavender::config::SupervisorMode::Observe);
    let run = h
        ._dir
        .path()
        .join("data/checkpoints/run-2026-01-01_00-00-00");
    two_checkpoints_with_manifests(&run);
    let newest = run.join("pretrain-00-00-02-0002");
    std::fs::write(newest.join("model.safetensors"), b"weightz").unwrap();
    h.pipeline
        .start(StartRequest {
            resume: Some("latest".into()),
            ..StartRequest::default()
        })
        .await
        .expect("started");
    match h.alert().await {
        Alert::CheckpointDamaged { message, .. } => assert!(
            message.contains("checkpoint pretrain-00-00-02-0002 is damaged")
                && message.contains("left in place (would have set it aside as ")
                && message.ends_with("; resuming from pretrain-00-00-01-0001"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    h.wait_for(|r| r.state.kind() == PipelineState::Running)
        .await;
    assert!(newest.join("model.safetensors").is_file());
    assert!(!run.join("damaged").exists());
    let path = crate::decisions::path(&Layout::new(h._dir.path().join("data"), None));
    let (entries, _) = crate::decisions::read(&path).unwrap();
    let d = &entries
        .iter()
        .find(|e| e.decision.kind == crate::decisions::DecisionKind::CheckpointSetAside)
        .expect("the set-aside written down")
        .decision;
    assert_eq!(d.mode, crate::decisions::Mode::WouldHave);
}

/// A checkpoint whose files cannot be read at all (a storage error: here ELOOP, as
/// EIO on a failing disk) is not damage: the launch is refused naming it, nothing is
/// set aside, no older checkpoint is taken in its place, every checkpoint is kept.
#[tokio::test(start_paused = true)]
async fn a_read_error_before_a_launch_sets_nothing_aside() {
    let h = harness(|_| {});
    let run = h
        ._dir
        .path()
        .join("data/checkpoints/run-2026-01-01_00-00-00");
    two_checkpoints_with_manifests(&run);
    let model = run.join("pretrain-00-00-02-0002/model.safetensors");
    std::fs::remove_file(&model).unwrap();
    std::os::unix::fs::symlink(&model, &model).unwrap();
    let _ = h
        .pipeline
        .start(StartRequest {
            resume: Some("latest".into()),
            ..StartRequest::default()
        })
        .await;
    let record = h.wait_state(PipelineState::Failed).await;
    let error = record.last_error.unwrap_or_default();
    assert!(
        error.contains("a storage error, not damage: checkpoint pretrain-00-00-02-0002")
            && error.contains("nothing was set aside"),
        "{error}"
    );
    assert!(!run.join("damaged").exists());
    assert!(
        run.join("pretrain-00-00-01-0001").is_dir() && run.join("pretrain-00-00-02-0002").is_dir()
    );
    assert!(h.fake.launched().is_empty());
}

/// A crash restart whose checkpoint cannot be read (a storage error: ELOOP here, as
/// EIO on a file system that fails for a while) waits instead of walking back: one
/// storage_error alert naming the file, nothing set aside, and once the file reads
/// again the restart resumes from that same checkpoint.
#[tokio::test(start_paused = true)]
async fn a_restart_waits_for_its_storage_and_resumes_from_the_same_checkpoint() {
    let mut h = harness(|s| s.storage_error_wait_s = 600);
    h.start().await;
    let run = h.pipeline.record().run_dir.expect("a run directory");
    two_checkpoints_with_manifests(&run);
    let model = run.join("pretrain-00-00-02-0002/model.safetensors");
    let weights = std::fs::read(&model).unwrap();
    std::fs::remove_file(&model).unwrap();
    std::os::unix::fs::symlink(&model, &model).unwrap();
    h.fake.exit(0, ExitOutcome::Signal(9));
    assert!(matches!(h.alert().await, Alert::Crashed { .. }));
    match h.alert().await {
        Alert::StorageError { message, .. } => assert!(
            message.contains("checkpoint pretrain-00-00-02-0002")
                && message.contains("model.safetensors")
                && message.contains("nothing is set aside"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // The storage reads again.
    std::fs::remove_file(&model).unwrap();
    std::fs::write(&model, weights).unwrap();
    let record = h.wait_restarted(1).await;
    let from = record.recovery.as_ref().and_then(|r| r.checkpoint.clone());
    assert_eq!(from.as_deref(), Some("pretrain-00-00-02-0002"));
    assert!(!run.join("damaged").exists());
    assert_eq!(h.fake.launched().len(), 2);
}

/// A storage error that does not clear within `storage_error_wait_s` fails the
/// pipeline naming the file, every checkpoint kept.
#[tokio::test(start_paused = true)]
async fn a_storage_error_that_does_not_clear_fails_naming_the_file() {
    let mut h = harness(|s| s.storage_error_wait_s = 1);
    h.start().await;
    let run = h.pipeline.record().run_dir.expect("a run directory");
    two_checkpoints_with_manifests(&run);
    let model = run.join("pretrain-00-00-02-0002/model.safetensors");
    std::fs::remove_file(&model).unwrap();
    std::os::unix::fs::symlink(&model, &model).unwrap();
    h.fake.exit(0, ExitOutcome::Signal(9));
    assert!(matches!(h.alert().await, Alert::Crashed { .. }));
    assert!(matches!(h.alert().await, Alert::StorageError { .. }));
    let record = h.wait_state(PipelineState::Failed).await;
    let error = record.last_error.unwrap_or_default();
    assert!(
        error.contains("a storage error, not damage: checkpoint pretrain-00-00-02-0002")
            && error.contains("supervisor.storage_error_wait_s")
            && error.contains("nothing was set aside"),
        "{error}"
    );
    assert!(!run.join("damaged").exists());
    assert!(run.join("pretrain-00-00-01-0001").is_dir());
    assert_eq!(h.fake.launched().len(), 1);
}

/// The worker's last heartbeat: diverged at `step`, since `since`.
fn diverged_at(run: &std::path::Path, step: u64, since: u64) {
    let mut failure = lavender::failure::Failure::new(FailureKind::Diverged, "loss spiked");
    failure.step = Some(step);
    failure.since_step = Some(since);
    let hb = lavender::heartbeat::Heartbeat {
        failure: Some(failure),
        ..lavender::heartbeat::Heartbeat::new(step, 100, "pretrain", WorkerState::Failed)
    };
    lavender::heartbeat::write(run, &hb).unwrap();
}

/// `on_diverged: rollback` (the default): the run goes back to its newest
/// checkpoint before the divergence, the later ones set aside, the range recorded,
/// the worker restarted at once from there; after `max_rollbacks` the pipeline
/// fails, naming the divergence.
#[tokio::test(start_paused = true)]
async fn a_divergence_rolls_back_at_once_then_fails_after_max_rollbacks() {
    let mut h = harness(|s| s.max_rollbacks = 2);
    h.start().await;
    let run = h.pipeline.record().run_dir.expect("a run directory");
    save_checkpoint(&run, "pretrain-00-00-01-0001", 10);
    save_checkpoint(&run, "pretrain-00-00-02-0002", 20);
    save_checkpoint(&run, "pretrain-00-00-03-0003", 30);
    diverged_at(&run, 34, 25);
    h.fake
        .exit(0, ExitOutcome::Code(FailureKind::Diverged.exit_code()));
    match h.alert().await {
        Alert::RolledBack {
            rollback, message, ..
        } => {
            assert_eq!(rollback, 1);
            assert!(
                message.contains("rolled back to pretrain-00-00-02-0002 (step 20)")
                    && message.contains("steps 21..=34")
                    && message.contains("1 checkpoint(s)"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    let record = h
        .wait_for(|r| r.state.kind() == PipelineState::Running && h.fake.launched().len() == 2)
        .await;
    assert_eq!(record.restarts, 0, "a rollback is not a crash restart");
    let ranges: Vec<(u64, u64)> = record
        .rollbacks
        .iter()
        .map(|r| (r.from_step, r.to_step))
        .collect();
    assert_eq!(ranges, [(20, 34)]);
    assert_eq!(
        lavender::skips::read(&run).unwrap().ranges,
        record.rollbacks
    );
    let recovery = record.recovery.expect("pipeline.recovery");
    assert_eq!(recovery.reason, RecoveryReason::RolledBack);
    assert_eq!(
        recovery.checkpoint.as_deref(),
        Some("pretrain-00-00-02-0002")
    );
    assert!(!run.join("pretrain-00-00-03-0003").exists());
    assert!(run.join(".diverged-pretrain-00-00-03-0003").is_dir());

    // Diverging again before a new save: back to the same checkpoint.
    diverged_at(&run, 23, 21);
    h.fake
        .exit(1, ExitOutcome::Code(FailureKind::Diverged.exit_code()));
    assert!(matches!(
        h.alert().await,
        Alert::RolledBack { rollback: 2, .. }
    ));
    h.wait_for(|r| r.state.kind() == PipelineState::Running && h.fake.launched().len() == 3)
        .await;
    // A third time: max_rollbacks is reached.
    diverged_at(&run, 22, 21);
    h.fake
        .exit(2, ExitOutcome::Code(FailureKind::Diverged.exit_code()));
    let record = h.wait_state(PipelineState::Failed).await;
    match h.alert().await {
        Alert::Failed {
            reason, failure, ..
        } => {
            assert!(
                reason.contains("loss spiked") && reason.contains("supervisor.max_rollbacks"),
                "{reason}"
            );
            assert_eq!(failure.map(|f| f.kind), Some(FailureKind::Diverged));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(record.rollbacks.len(), 2);
    tokio::time::sleep(secs(600.0)).await;
    assert_eq!(h.fake.launched().len(), 3, "no restart after failing");
}

/// `on_diverged: fail`: no rollback; the pipeline fails at once naming it.
#[tokio::test(start_paused = true)]
async fn on_diverged_fail_fails_at_once() {
    let mut h = harness(|s| s.on_diverged = lavender::config::OnDiverged::Fail);
    h.start().await;
    let run = h.pipeline.record().run_dir.expect("a run directory");
    save_checkpoint(&run, "pretrain-00-00-01-0001", 10);
    diverged_at(&run, 14, 12);
    h.fake
        .exit(0, ExitOutcome::Code(FailureKind::Diverged.exit_code()));
    h.wait_state(PipelineState::Failed).await;
    match h.alert().await {
        Alert::Failed { reason, .. } => assert!(reason.contains("diverged"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.fake.launched().len(), 1);
    assert_eq!(lavender::skips::read(&run).unwrap().ranges, []);
}

#[tokio::test(start_paused = true)]
async fn restarts_that_make_no_progress_fail_saying_so() {
    let h = harness(|s| {
        s.restart_backoff_s = vec![0.5];
        s.max_restarts = 10;
        s.max_no_progress_restarts = 2;
    });
    h.start().await;
    // The fake workers write no heartbeat: none trains past where it resumed.
    h.fake.exit(0, ExitOutcome::Code(1));
    h.wait_restarted(1).await;
    h.fake.exit(1, ExitOutcome::Code(1));
    h.wait_restarted(2).await;
    h.fake.exit(2, ExitOutcome::Code(1));
    let record = h.wait_state(PipelineState::Failed).await;
    assert_eq!(record.no_progress_restarts, 2);
    let reason = record.last_error.unwrap();
    assert!(
        reason.contains("did not train past step 0") && reason.contains("max_no_progress"),
        "{reason}"
    );
    assert_eq!(h.fake.launched().len(), 3);
}

/// Observe mode: a hung worker gets no signal and no restart; the decision log says
/// what would have been done, and the push says it is stalled.
#[tokio::test(start_paused = true)]
async fn in_observe_mode_a_hung_worker_is_left_alone_and_the_kill_written_down() {
    let mut h = harness(|s| s.mode = lavender::config::SupervisorMode::Observe);
    h.start().await;
    assert!(h.hung(h.worker(), 12, 95.0));
    match h.alert().await {
        Alert::Stale {
            age_s,
            training_step,
            ..
        } => assert_eq!((age_s, training_step), (Some(95), Some(12))),
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(secs(30.0)).await;
    assert!(h.fake.signals(0).is_empty());
    assert_eq!(h.fake.launched().len(), 1);
    let path = crate::decisions::path(&Layout::new(h._dir.path().join("data"), None));
    let (entries, _) = crate::decisions::read(&path).unwrap();
    assert_eq!(entries.len(), 1);
    let d = &entries[0].decision;
    assert_eq!(d.kind, crate::decisions::DecisionKind::HangKill);
    assert_eq!(d.mode, crate::decisions::Mode::WouldHave);
    assert_eq!(d.saw.last_step, Some(12));
    assert_eq!(
        entries[0].outcome.as_ref().map(|o| o.result),
        Some(crate::decisions::OutcomeKind::NotActed)
    );
}

/// A worker that stopped beating and ignores SIGTERM (a deadlock, a stopped
/// process): SIGKILL after the grace, then restarted at once; the alert and the
/// status say what happened.
#[tokio::test(start_paused = true)]
async fn a_hung_worker_is_killed_after_the_grace_and_restarted() {
    // The fake worker has no process to take stacks of (daemon/tests/it/hang_evidence.rs).
    let mut h = harness(|s| {
        s.stall_kill_grace_s = 2.0;
        s.hang_evidence = false;
    });
    h.fake.ignore_sigterm();
    h.start().await;
    assert!(h.hung(h.worker(), 12, 95.0));
    h.wait_for(|r| r.last_error.is_some()).await;
    assert_eq!(h.fake.signals(0), [Signal::SIGTERM]);
    tokio::time::sleep(secs(1.9)).await;
    assert_eq!(
        h.fake.signals(0),
        [Signal::SIGTERM],
        "SIGKILL before the grace"
    );
    tokio::time::sleep(secs(0.2)).await;
    assert_eq!(h.fake.signals(0), [Signal::SIGTERM, Signal::SIGKILL]);
    let record = h.wait_restarted(1).await;
    assert_eq!(h.fake.launched().len(), 2);
    let recovery = record.recovery.expect("the status says why");
    assert_eq!(recovery.reason, RecoveryReason::Hung);
    assert_eq!(
        recovery.message,
        "hung at step 12 for 1m 35s; restarted from the start (no checkpoint yet)"
    );
    match h.alert().await {
        Alert::HungRestarted { message, .. } => assert_eq!(message, recovery.message),
        other => panic!("{other:?}"),
    }
    // Reported twice, or about a worker that is gone: nothing more happens.
    assert!(h.hung(h.fake_handle(0), 12, 200.0));
    tokio::time::sleep(secs(30.0)).await;
    assert_eq!(h.fake.launched().len(), 2);
    assert!(h.fake.signals(1).is_empty());
}

impl Harness {
    /// The handle of fake worker `n` (0-based, in launch order).
    fn fake_handle(&self, n: u32) -> WorkerHandle {
        WorkerHandle::Local(ProcessIdentity {
            pid: (1 << 30) + n,
            start_time: "fake".into(),
            generation: None,
        })
    }
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
    let record = h.pipeline.record();
    assert_eq!(record.state.kind(), PipelineState::Stopped);
    assert_eq!(record.stop_cause(), Some(StopCause::Operator));
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_saves_on_sigterm_stops_without_escalation() {
    let h = harness(|_| {});
    h.start().await;
    let report = h.pipeline.stop(Some(secs(5.0))).await.expect("a report");
    assert!(!report.killed, "{report:?}");
    assert_eq!(h.fake.signals(0), [Signal::SIGTERM]);
    let record = h.wait_state(PipelineState::Stopped).await;
    assert!(record.worker().is_none());
}

/// A stop while a hung worker is being killed is a stop: no restart follows.
#[tokio::test(start_paused = true)]
async fn a_stop_while_killing_a_hung_worker_does_not_restart_it() {
    let h = harness(|s| s.stall_kill_grace_s = 5.0);
    h.fake.ignore_sigterm();
    h.start().await;
    assert!(h.hung(h.worker(), 3, 70.0));
    h.wait_for(|r| r.last_error.is_some()).await;
    let report = h.pipeline.stop(Some(secs(1.0))).await.expect("a report");
    assert!(report.killed, "{report:?}");
    tokio::time::sleep(secs(30.0)).await;
    assert_eq!(h.fake.launched().len(), 1);
    assert_eq!(h.pipeline.record().state.kind(), PipelineState::Stopped);
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_the_backoff_cancels_the_restart() {
    let mut h = harness(|s| {
        s.restart_backoff_s = vec![10.0];
        s.max_restarts = 3;
    });
    h.start().await;
    h.fake.exit(0, ExitOutcome::Code(1));
    h.wait_restarted(1).await;
    h.fake.exit(1, ExitOutcome::Code(1));
    h.wait_state(PipelineState::Crashed).await;
    while let Ok(alert) = h.alerts.try_recv() {
        assert!(matches!(alert, Alert::Crashed { .. }), "{alert:?}");
    }
    let report = h.pipeline.stop(None).await.expect("a report");
    assert!(
        report.message.starts_with("cancelled the pending restart"),
        "{report:?}"
    );
    tokio::time::sleep(secs(60.0)).await;
    assert_eq!(h.fake.launched().len(), 2, "restarted after the stop");
    assert_eq!(h.pipeline.record().state.kind(), PipelineState::Stopped);
}

/// What the previous daemon left: a train step stopped (or running) in a run.
fn left_behind(state: PipelineState, cause: Option<StopCause>) -> PipelineRecord {
    PipelineRecord {
        state: match state {
            PipelineState::Stopped => RecordState::Stopped { cause },
            PipelineState::Stopping => RecordState::Stopping {
                cause,
                worker: None,
            },
            other => RecordState::of_kind(other),
        },
        chunk: Some(1),
        scale: Some(lavender::config::Scale::Tiny),
        steps: vec![StepEntry {
            name: PipelineStep::Train,
            state: StepState::Pending,
        }],
        active_step: Some(PipelineStep::Train),
        ..PipelineRecord::idle()
    }
}

#[tokio::test(start_paused = true)]
async fn the_daemons_own_exit_is_resumed_at_its_next_start() {
    let mut h = harness_after(
        Some(left_behind(
            PipelineState::Stopped,
            Some(StopCause::DaemonExit),
        )),
        |_| {},
    );
    let record = h.wait_state(PipelineState::Running).await;
    assert_eq!(h.fake.launched(), [PipelineStep::Train]);
    assert_eq!(record.stop_cause(), None);
    let recovery = record.recovery.expect("the status says why it resumed");
    assert_eq!(recovery.reason, RecoveryReason::DaemonExit);
    assert!(matches!(
        h.alert().await,
        Alert::Resumed {
            reason: RecoveryReason::DaemonExit,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_worker_gone_with_the_daemon_is_a_power_loss_and_resumes() {
    let mut record = left_behind(PipelineState::Running, None);
    record.steps[0].state = StepState::Running;
    // A worker of the previous boot: no such process now.
    record.state = RecordState::Running {
        worker: Some(WorkerRecord {
            handle: WorkerHandle::Local(ProcessIdentity {
                pid: (1 << 30) + 77,
                start_time: "1".into(),
                generation: None,
            }),
            step: PipelineStep::Train,
            started_at: "2026-01-01T00:00:00Z".parse().unwrap(),
            resumed_from_step: None,
        }),
    };
    let mut h = harness_after(Some(record), |_| {});
    // The record said running all along: wait for the new worker.
    let record = h.wait_for(|r| r.recovery.is_some()).await;
    assert_eq!(h.fake.launched(), [PipelineStep::Train]);
    assert_eq!(record.restarts, 0, "not counted as a crash restart");
    assert_eq!(record.recovery.unwrap().reason, RecoveryReason::PowerLoss);
    assert!(matches!(
        h.alert().await,
        Alert::Resumed {
            reason: RecoveryReason::PowerLoss,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn an_operators_stop_and_resume_on_start_off_stay_stopped() {
    for (cause, resume_on_start) in [
        (StopCause::Operator, true),
        (StopCause::External, true),
        (StopCause::DaemonExit, false),
    ] {
        let h = harness_after(
            Some(left_behind(PipelineState::Stopped, Some(cause))),
            |s| s.resume_on_start = resume_on_start,
        );
        assert!(h.pipeline.ping().await);
        tokio::time::sleep(secs(60.0)).await;
        assert!(h.fake.launched().is_empty(), "{cause:?} resumed");
        let record = h.pipeline.record();
        assert_eq!(record.state.kind(), PipelineState::Stopped);
        assert_eq!(record.stop_cause(), Some(cause));
    }
}

#[tokio::test(start_paused = true)]
async fn a_learned_interval_is_kept_in_the_run_when_it_grows() {
    let h = harness(|_| {});
    h.start().await;
    let run = h.pipeline.record().run_dir.expect("a run");
    assert!(h.pipeline.report_interval(run.clone(), 1.5));
    h.wait_for(|r| r.heartbeat_interval_s == Some(1.5)).await;
    // Shorter, or another run's: kept as it was.
    assert!(h.pipeline.report_interval(run, 1.0));
    assert!(h.pipeline.report_interval("/elsewhere".into(), 9.0));
    assert!(h.pipeline.ping().await);
    assert_eq!(h.pipeline.record().heartbeat_interval_s, Some(1.5));
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
    assert_eq!(h.pipeline.record().state.kind(), PipelineState::Stopped);
    let reply = start.await.unwrap().expect("the start is answered");
    assert_eq!(reply.state, PipelineState::Stopped);

    // The launch returns: its worker is cancelled, never supervised.
    h.fake.release_launches();
    until(|| h.fake.signals(0) == [Signal::SIGKILL]).await;
    tokio::time::sleep(secs(1.0)).await;
    let record = h.pipeline.record();
    assert_eq!(record.state.kind(), PipelineState::Stopped);
    assert!(record.worker().is_none(), "{record:?}");

    // A new start launches afresh.
    h.pipeline
        .start(StartRequest::default())
        .await
        .expect("started again");
    assert_eq!(
        h.fake.launched(),
        [PipelineStep::Train, PipelineStep::Train]
    );
    assert_eq!(h.pipeline.record().state.kind(), PipelineState::Running);
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
        record.worker().is_some(),
        "the record names the worker left running: {record:?}"
    );
}

/// The worker's start is kept at the precision its records are written at (whole
/// milliseconds): a heartbeat or a failure it writes in the millisecond it started
/// is its own for the judge, the hang watch and the status alike, not taken for the
/// previous worker's (a nanosecond start made such a record look older).
#[tokio::test(start_paused = true)]
async fn a_workers_start_is_kept_at_its_records_precision() {
    use chrono::SubsecRound;
    let before = lavender::time::now_utc().trunc_subsecs(3);
    let h = harness(|_| {});
    h.start().await;
    let started = h
        .pipeline
        .record()
        .worker()
        .cloned()
        .expect("a worker")
        .started_at;
    assert_eq!(started, started.trunc_subsecs(3), "{started:?}");
    assert!(started >= before, "{started:?} < {before:?}");
}

/// A pipeline of `downloads` alone, reading a folder holding `a.txt`, started.
async fn downloads_of_a_folder() -> (tempfile::TempDir, std::path::PathBuf, Harness) {
    let corpus_dir = tempfile::tempdir().unwrap();
    let corpus = corpus_dir.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("a.txt"), "alpha").unwrap();
    let mut config = Config {
        steps: vec![PipelineStep::Downloads],
        ..Config::default()
    };
    config.data.sources = vec![lavender::config::DataSource::Path(
        lavender::config::PathSource::text(&corpus),
    )];
    let h = harness_of(None, config);
    h.pipeline
        .start(StartRequest::default())
        .await
        .expect("started");
    (corpus_dir, corpus, h)
}

/// A source folder's files are fingerprinted on the blocking pool, at the start and
/// when the step's worker ends: its done-marker records them, and the next start
/// names a file added to the folder.
#[tokio::test(start_paused = true)]
async fn a_source_folder_fingerprinted_off_the_actor_names_a_file_added() {
    let (_corpus_dir, corpus, h) = downloads_of_a_folder().await;
    assert_eq!(h.fake.launched(), [PipelineStep::Downloads]);
    h.fake.exit(0, ExitOutcome::Code(0));
    h.wait_state(PipelineState::Finished).await;
    let layout = Layout::new(h._dir.path().join("data"), None);
    let marker = lavender::steps::markers::read(&layout, 1, PipelineStep::Downloads).unwrap();
    let recorded = marker.inputs.expect("inputs recorded");
    let a = format!("file {}", corpus.join("a.txt").display());
    assert!(recorded.0.contains_key(&a), "{recorded:?}");

    std::fs::write(corpus.join("b.txt"), "beta").unwrap();
    runs_again_naming(&h, &format!("{} added", corpus.join("b.txt").display())).await;
}

/// The fingerprints a done-marker records are taken before the step starts: a file
/// edited while `downloads` runs is not recorded as read, and the next start runs it
/// again naming that file.
#[tokio::test(start_paused = true)]
async fn a_source_file_edited_while_its_step_runs_reruns_it() {
    let (_corpus_dir, corpus, h) = downloads_of_a_folder().await;
    h.wait_state(PipelineState::Running).await;
    // While the worker runs.
    std::fs::write(corpus.join("a.txt"), "ALPHA").unwrap();
    h.fake.exit(0, ExitOutcome::Code(0));
    h.wait_state(PipelineState::Finished).await;

    runs_again_naming(&h, &format!("{} changed", corpus.join("a.txt").display())).await;
}

/// A second start runs `downloads` again, its reply naming `why`.
async fn runs_again_naming(h: &Harness, why: &str) {
    let reply = h
        .pipeline
        .start(StartRequest::default())
        .await
        .expect("started again");
    assert_eq!(reply.nothing_to_do, None, "{reply:?}");
    assert!(
        reply.notices.iter().any(|n| n.contains(why)),
        "{:?}",
        reply.notices
    );
    assert_eq!(
        h.fake.launched(),
        [PipelineStep::Downloads, PipelineStep::Downloads]
    );
}

/// A prune through the actor keeps the run a start is launching a worker into,
/// even with `keep_runs` 0, while neither the published record nor the one on disk
/// names that run yet (what a prune of the files alone would go by).
#[tokio::test(start_paused = true)]
async fn a_prune_never_deletes_the_run_being_started() {
    let h = harness(|_| {});
    let layout = Layout::new(h._dir.path().join("data"), None);
    let old = layout.checkpoints_root().join("run-2020-01-01_00-00-00");
    std::fs::create_dir_all(&old).unwrap();
    h.fake.hold_launches();
    let pipeline = h.pipeline.clone();
    let start = tokio::spawn(async move { pipeline.start(StartRequest::default()).await });
    until(|| h.fake.held_launches() == 1).await;
    let starting = lavender::run::list_runs(&layout.checkpoints_root())
        .unwrap()
        .into_iter()
        .map(|r| r.path)
        .find(|p| *p != old)
        .expect("the run being started");
    let on_disk = PipelineRecord::load(&layout).unwrap().run_dir;
    let published = h.pipeline.record().run_dir;

    let ask = |delete: Option<Vec<String>>| {
        h.pipeline.prune(lavender_api::PruneRequest {
            keep_runs: 0,
            delete,
        })
    };
    let plan = ask(None).await.unwrap();
    let mut all = plan.planned.clone();
    all.push(starting.file_name().unwrap().to_string_lossy().into());
    let done = ask(Some(all.clone())).await.unwrap();
    let survived = starting.is_dir();
    h.fake.release_launches();
    start.await.unwrap().expect("started");

    assert_ne!(
        on_disk.as_ref(),
        Some(&starting),
        "the files name it already"
    );
    assert_ne!(published.as_ref(), Some(&starting));
    assert_eq!(plan.planned, ["run-2020-01-01_00-00-00"]);
    assert_eq!(done.removed, ["run-2020-01-01_00-00-00"]);
    assert_eq!(done.kept, [all[1].clone()]);
    assert!(survived && !old.exists());
}
