//! Deciding how a step ended. Our own child reports its exit status; a re-adopted
//! worker does not (it is not our child), so its last heartbeat (train) or its
//! step manifest (data steps) decides. A worker that failed says why: the
//! `failure` of its last heartbeat or of its `failed` event (any step's, in the
//! pipeline's run), else its exit code. A launcher's exit code (torchrun exits 1
//! whatever its rank's was) never hides what the rank said.

use std::path::Path;

use chrono::{DateTime, SubsecRound, Utc};
use lavender::config::PipelineStep;
use lavender::events::{self, kind};
use lavender::failure::{Failure, FailureKind};
use lavender::heartbeat::{self, WorkerState};
use lavender::time::parse_rfc3339 as parse_time;
use serde_json::Value;

use crate::exit::ExitOutcome;

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Success,
    /// Exited after a SIGTERM we did not send (its final heartbeat says `stopping`).
    StoppedExternally,
    Failed {
        failure: Failure,
        /// The worker said why (its heartbeat or a `failed` event), rather than
        /// the daemon guessing from an exit code or from its absence.
        said: bool,
    },
}

/// How a step ended, and how far its worker got.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub verdict: Verdict,
    /// The training step of the last heartbeat this worker wrote (train only).
    pub last_step: Option<u64>,
}

/// What the last heartbeat on disk says, read leniently: a `failure` that does not
/// parse is a `crash` naming it, not an unreadable heartbeat.
struct LastHeartbeat {
    state: Option<WorkerState>,
    step: Option<u64>,
    at: Option<DateTime<Utc>>,
    failure: Option<Failure>,
}

fn last_heartbeat(run_dir: &Path) -> Option<LastHeartbeat> {
    let bytes = std::fs::read(heartbeat::path(run_dir)).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    Some(LastHeartbeat {
        state: serde_json::from_value(v["state"].clone()).ok(),
        step: v["step"].as_u64(),
        at: v["timestamp"].as_str().and_then(parse_time),
        failure: v.get("failure").filter(|f| !f.is_null()).map(read_failure),
    })
}

/// A `failure` value; one that does not parse is a `crash`, and its raw text is logged.
fn read_failure(value: &Value) -> Failure {
    let failure = Failure::from_value(value);
    if failure.kind == FailureKind::Crash
        && serde_json::from_value::<Failure>(value.clone()).is_err()
    {
        tracing::warn!("the worker's failure record does not parse, taken as a crash: {value}");
    }
    failure
}

/// The last `failed` event the worker wrote since `since`, reading at most the
/// last 64 KiB of `events.jsonl`.
fn failed_event(run_dir: &Path, since: Option<DateTime<Utc>>) -> Option<Failure> {
    const TAIL: u64 = 64 * 1024;
    let path = events::path(run_dir);
    let len = std::fs::metadata(&path).ok()?.len();
    let batch = events::read_from(&path, len.saturating_sub(TAIL)).ok()?;
    batch
        .events
        .iter()
        .rev()
        .filter(|e| e.kind == kind::FAILED)
        .find(|e| since.is_none_or(|s| parse_time(&e.ts).is_some_and(|t| t >= s)))
        .map(|e| match e.field("failure") {
            Some(value) => read_failure(value),
            None => Failure::new(FailureKind::Crash, e.message.clone()),
        })
}

/// A failure the daemon tells from the exit alone.
fn from_exit(outcome: ExitOutcome) -> Failure {
    let kind = match outcome {
        ExitOutcome::Code(code) => FailureKind::from_exit_code(code),
        _ => FailureKind::Crash,
    };
    Failure::new(kind, outcome.to_string())
}

pub fn judge(
    step: PipelineStep,
    outcome: ExitOutcome,
    run_dir: Option<&Path>,
    data_root: &Path,
    started_at: Option<DateTime<Utc>>,
) -> Judgement {
    let train_dir = run_dir.filter(|_| step == PipelineStep::Train);
    // Records carry their time in whole milliseconds (`time::rfc3339_z`): a record
    // written in the millisecond the worker started reads as earlier than a start
    // kept to the nanosecond, so the start is compared at the records' precision.
    let started_at = started_at.map(|s| s.trunc_subsecs(3));
    let hb = train_dir.and_then(last_heartbeat);
    // Written by this worker, not left by the one before it.
    let mine = hb
        .as_ref()
        .filter(|hb| started_at.is_none_or(|s| hb.at.is_some_and(|at| at >= s)));
    let last_step = mine.and_then(|hb| hb.step);
    let final_state = hb.as_ref().and_then(|hb| hb.state);
    // A data step (and `mine_hard`) says why in a `failed` event of the pipeline's
    // run too; only one written since its start is its own.
    let events_dir = run_dir.filter(|_| step == PipelineStep::Train || started_at.is_some());
    let said = || {
        mine.and_then(|hb| hb.failure.clone())
            .or_else(|| events_dir.and_then(|d| failed_event(d, started_at)))
    };
    let failed = |failure: Failure, said: bool| Verdict::Failed { failure, said };
    let told_or = |fallback: Failure| match said() {
        Some(failure) => failed(failure, true),
        None => failed(fallback, false),
    };
    let verdict = match outcome {
        ExitOutcome::Code(0) => match final_state {
            Some(WorkerState::Stopping) => Verdict::StoppedExternally,
            Some(WorkerState::Failed) => told_or(Failure::new(
                FailureKind::Crash,
                "exit code 0 but the final heartbeat says failed",
            )),
            _ => Verdict::Success,
        },
        ExitOutcome::Code(_) | ExitOutcome::Signal(_) => told_or(from_exit(outcome)),
        ExitOutcome::Unknown if step == PipelineStep::Train => match final_state {
            Some(WorkerState::Finished) => Verdict::Success,
            Some(WorkerState::Stopping) => Verdict::StoppedExternally,
            Some(state) => told_or(Failure::new(
                FailureKind::Crash,
                format!("the worker vanished while its heartbeat said {state}"),
            )),
            None => told_or(Failure::new(
                FailureKind::Crash,
                "the worker vanished and left no heartbeat",
            )),
        },
        ExitOutcome::Unknown => {
            let finished = lavender::manifest::read(data_root, step.as_str())
                .ok()
                .flatten()
                .and_then(|m| DateTime::parse_from_rfc3339(&m.finished_at).ok())
                .map(|t| t.with_timezone(&Utc));
            match (finished, started_at) {
                (Some(done), Some(start)) if done >= start => Verdict::Success,
                _ => failed(
                    Failure::new(
                        FailureKind::Crash,
                        format!("the worker vanished without writing the {step} manifest"),
                    ),
                    false,
                ),
            }
        }
    };
    Judgement { verdict, last_step }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::heartbeat::Heartbeat;

    fn hb_at(dir: &Path, state: WorkerState, at: &str, failure: Option<Failure>) {
        heartbeat::write(
            dir,
            &Heartbeat {
                timestamp: at.into(),
                failure,
                ..Heartbeat::new(7, 20, "pretrain", state)
            },
        )
        .unwrap();
    }

    fn hb(dir: &Path, state: WorkerState) {
        hb_at(dir, state, "2026-01-01T00:00:00Z", None);
    }

    fn verdict(step: PipelineStep, outcome: ExitOutcome, run: Option<&Path>, d: &Path) -> Verdict {
        judge(step, outcome, run, d, None).verdict
    }

    fn failed_kind(v: &Verdict) -> Option<(FailureKind, bool)> {
        match v {
            Verdict::Failed { failure, said } => Some((failure.kind, *said)),
            _ => None,
        }
    }

    #[test]
    fn own_child_exit_codes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(
            verdict(PipelineStep::Dedup, ExitOutcome::Code(0), None, d),
            Verdict::Success
        );
        assert_eq!(
            failed_kind(&verdict(PipelineStep::Dedup, ExitOutcome::Code(1), None, d)),
            Some((FailureKind::Crash, false))
        );
        assert_eq!(
            failed_kind(&verdict(
                PipelineStep::Train,
                ExitOutcome::Signal(9),
                Some(d),
                d
            )),
            Some((FailureKind::Crash, false))
        );
        hb(d, WorkerState::Stopping);
        assert_eq!(
            verdict(PipelineStep::Train, ExitOutcome::Code(0), Some(d), d),
            Verdict::StoppedExternally
        );
    }

    /// Without a record, the exit code names the kind (`lavender_protocol` and
    /// `lavender-worker` exit with the kind's code).
    #[test]
    fn exit_codes_name_the_kind_when_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for kind in FailureKind::ALL {
            let v = verdict(
                PipelineStep::Train,
                ExitOutcome::Code(kind.exit_code()),
                Some(d),
                d,
            );
            assert_eq!(failed_kind(&v), Some((kind, false)), "{kind}");
        }
    }

    /// The worker's own word wins over its exit code: the heartbeat's `failure`,
    /// else its `failed` event; both only when written since it started.
    #[test]
    fn the_workers_failure_record_names_the_kind() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let started = parse_time("2026-01-01T00:00:00Z");
        let oom = Failure::new(FailureKind::OutOfMemory, "CUDA out of memory");
        hb_at(
            d,
            WorkerState::Failed,
            "2026-01-01T00:00:05Z",
            Some(oom.clone()),
        );
        let j = judge(
            PipelineStep::Train,
            ExitOutcome::Code(1),
            Some(d),
            d,
            started,
        );
        assert_eq!(
            j.verdict,
            Verdict::Failed {
                failure: oom,
                said: true
            }
        );
        assert_eq!(j.last_step, Some(7));

        // A heartbeat left by the worker before does not speak for this one.
        let later = parse_time("2026-01-01T00:01:00Z");
        let j = judge(
            PipelineStep::Train,
            ExitOutcome::Code(78),
            Some(d),
            d,
            later,
        );
        assert_eq!(failed_kind(&j.verdict), Some((FailureKind::Config, false)));
        assert_eq!(j.last_step, None);

        // A `failed` event since the start does.
        let mut event = events::Event::new(kind::FAILED, "no such tokenizer");
        event.ts = "2026-01-01T00:02:00Z".into();
        let event = event.with(
            "failure",
            Failure::new(FailureKind::Data, "tokens/index.json is missing"),
        );
        events::append(d, &event).unwrap();
        let j = judge(PipelineStep::Train, ExitOutcome::Code(1), Some(d), d, later);
        match j.verdict {
            Verdict::Failed { failure, said } => {
                assert!(said);
                assert_eq!(failure.kind, FailureKind::Data);
                assert!(failure.message.contains("index.json"), "{failure:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_data_step_is_judged_by_the_failed_event_it_wrote_in_the_run_since_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let started = parse_time("2026-01-01T00:01:00Z");
        let dedup = |code| {
            judge(
                PipelineStep::Dedup,
                ExitOutcome::Code(code),
                Some(d),
                d,
                started,
            )
        };
        // Another step's failure, before this one started, does not speak for it.
        let mut old = events::Event::new(kind::FAILED, "train crashed");
        old.ts = "2026-01-01T00:00:30Z".into();
        events::append(
            d,
            &old.with("failure", Failure::new(FailureKind::Crash, "train crashed")),
        )
        .unwrap();
        assert_eq!(
            failed_kind(&dedup(65).verdict),
            Some((FailureKind::Data, false))
        );
        let mut event = events::Event::new(kind::FAILED, "dedup failed");
        event.ts = "2026-01-01T00:01:00.000Z".into();
        let said = Failure::new(
            FailureKind::Data,
            "documents/ is missing: run the downloads step first",
        );
        events::append(
            d,
            &event.with("failure", said.clone()).with("step", "dedup"),
        )
        .unwrap();
        // Its own exit code, or a launcher's 1: what it said is the failure.
        for code in [65, 1] {
            assert_eq!(
                dedup(code).verdict,
                Verdict::Failed {
                    failure: said.clone(),
                    said: true
                }
            );
        }
    }

    #[test]
    fn an_unreadable_failure_record_is_a_crash_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(
            heartbeat::path(d),
            r#"{"step": 3, "timestamp": "2026-01-01T00:00:05Z", "state": "failed", "failure": {"kind": "meteor"}}"#,
        )
        .unwrap();
        match verdict(PipelineStep::Train, ExitOutcome::Code(80), Some(d), d) {
            Verdict::Failed { failure, said } => {
                assert!(said);
                assert_eq!(failure.kind, FailureKind::Crash);
                assert!(failure.message.contains("meteor"), "{failure:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn adopted_worker_is_judged_by_its_final_heartbeat() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let unknown = |d: &Path| verdict(PipelineStep::Train, ExitOutcome::Unknown, Some(d), d);
        assert_eq!(failed_kind(&unknown(d)), Some((FailureKind::Crash, false)));
        hb(d, WorkerState::Training);
        assert_eq!(failed_kind(&unknown(d)), Some((FailureKind::Crash, false)));
        hb(d, WorkerState::Finished);
        assert_eq!(unknown(d), Verdict::Success);
    }

    #[test]
    fn adopted_data_step_is_judged_by_a_fresh_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let started = Utc::now() - chrono::Duration::seconds(5);
        let dedup =
            |at| judge(PipelineStep::Dedup, ExitOutcome::Unknown, None, d, Some(at)).verdict;
        assert!(failed_kind(&dedup(started)).is_some());
        let m: lavender::manifest::StepManifest = serde_json::from_value(serde_json::json!({
            "step": "dedup", "version": 1, "config_hash": "x", "inputs": [], "counts": {},
            "outputs": [], "finished_at": lavender::time::rfc3339_z(Utc::now()),
        }))
        .unwrap();
        lavender::manifest::write(d, &m).unwrap();
        assert_eq!(dedup(started), Verdict::Success);
        let later = Utc::now() + chrono::Duration::seconds(5);
        assert!(
            failed_kind(&dedup(later)).is_some(),
            "a manifest older than the worker's start is from an earlier run"
        );
    }
}
