//! Deciding how a step ended. Our own child reports its exit status; a re-adopted
//! worker does not (it is not our child), so its last heartbeat (train) or its
//! step manifest (data steps) decides.

use std::path::Path;

use chrono::{DateTime, Utc};
use lavender::config::PipelineStep;
use lavender::heartbeat::{self, WorkerState};

use crate::exit::ExitOutcome;

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Success,
    /// Exited after a SIGTERM we did not send (its final heartbeat says `stopping`).
    StoppedExternally,
    Crash(String),
}

pub fn judge(
    step: PipelineStep,
    outcome: ExitOutcome,
    run_dir: Option<&Path>,
    data_root: &Path,
    started_at: Option<DateTime<Utc>>,
) -> Verdict {
    let final_state = run_dir
        .filter(|_| step == PipelineStep::Train)
        .and_then(|dir| heartbeat::read(&heartbeat::path(dir)).ok())
        .map(|hb| hb.state);
    match outcome {
        ExitOutcome::Code(0) => match final_state {
            Some(WorkerState::Stopping) => Verdict::StoppedExternally,
            Some(WorkerState::Failed) => {
                Verdict::Crash("exit code 0 but the final heartbeat says failed".into())
            }
            _ => Verdict::Success,
        },
        ExitOutcome::Code(_) | ExitOutcome::Signal(_) => Verdict::Crash(outcome.to_string()),
        ExitOutcome::Unknown if step == PipelineStep::Train => match final_state {
            Some(WorkerState::Finished) => Verdict::Success,
            Some(WorkerState::Stopping) => Verdict::StoppedExternally,
            Some(state) => Verdict::Crash(format!(
                "the worker vanished while its heartbeat said {state}"
            )),
            None => Verdict::Crash("the worker vanished and left no heartbeat".into()),
        },
        ExitOutcome::Unknown => {
            let finished = lavender::manifest::read(data_root, step.as_str())
                .ok()
                .flatten()
                .and_then(|m| DateTime::parse_from_rfc3339(&m.finished_at).ok())
                .map(|t| t.with_timezone(&Utc));
            match (finished, started_at) {
                (Some(done), Some(start)) if done >= start => Verdict::Success,
                _ => Verdict::Crash(format!(
                    "the worker vanished without writing the {step} manifest"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::heartbeat::Heartbeat;

    fn hb(dir: &Path, state: WorkerState) {
        heartbeat::write(
            dir,
            &Heartbeat {
                step: 1,
                total_steps: 2,
                stage: "pretrain".into(),
                epoch: None,
                epochs: None,
                loss: None,
                loss_smooth: None,
                lr: None,
                grad_norm: None,
                steps_per_sec: None,
                eta_seconds: None,
                timestamp: "2026-01-01T00:00:00Z".into(),
                pid: 1,
                state,
                latest_checkpoint: None,
                failure: None,
            },
        )
        .unwrap();
    }

    #[test]
    fn own_child_exit_codes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(
            judge(PipelineStep::Dedup, ExitOutcome::Code(0), None, d, None),
            Verdict::Success
        );
        assert!(matches!(
            judge(PipelineStep::Dedup, ExitOutcome::Code(1), None, d, None),
            Verdict::Crash(_)
        ));
        assert!(matches!(
            judge(
                PipelineStep::Train,
                ExitOutcome::Signal(9),
                Some(d),
                d,
                None
            ),
            Verdict::Crash(_)
        ));
        hb(d, WorkerState::Stopping);
        assert_eq!(
            judge(PipelineStep::Train, ExitOutcome::Code(0), Some(d), d, None),
            Verdict::StoppedExternally
        );
    }

    #[test]
    fn adopted_worker_is_judged_by_its_final_heartbeat() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert!(matches!(
            judge(PipelineStep::Train, ExitOutcome::Unknown, Some(d), d, None),
            Verdict::Crash(_)
        ));
        hb(d, WorkerState::Training);
        assert!(matches!(
            judge(PipelineStep::Train, ExitOutcome::Unknown, Some(d), d, None),
            Verdict::Crash(_)
        ));
        hb(d, WorkerState::Finished);
        assert_eq!(
            judge(PipelineStep::Train, ExitOutcome::Unknown, Some(d), d, None),
            Verdict::Success
        );
    }

    #[test]
    fn adopted_data_step_is_judged_by_a_fresh_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let started = Utc::now() - chrono::Duration::seconds(5);
        assert!(matches!(
            judge(
                PipelineStep::Dedup,
                ExitOutcome::Unknown,
                None,
                d,
                Some(started)
            ),
            Verdict::Crash(_)
        ));
        let m: lavender::manifest::StepManifest = serde_json::from_value(serde_json::json!({
            "step": "dedup", "version": 1, "config_hash": "x", "inputs": [], "counts": {},
            "outputs": [], "finished_at": lavender::time::rfc3339_z(Utc::now()),
        }))
        .unwrap();
        lavender::manifest::write(d, &m).unwrap();
        assert_eq!(
            judge(
                PipelineStep::Dedup,
                ExitOutcome::Unknown,
                None,
                d,
                Some(started)
            ),
            Verdict::Success
        );
        let later = Utc::now() + chrono::Duration::seconds(5);
        assert!(
            matches!(
                judge(
                    PipelineStep::Dedup,
                    ExitOutcome::Unknown,
                    None,
                    d,
                    Some(later)
                ),
                Verdict::Crash(_)
            ),
            "a manifest older than the worker's start is from an earlier run"
        );
    }
}
