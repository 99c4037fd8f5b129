//! Deciding how a step ended. Our own child reports its exit status; a re-adopted
//! worker does not (it is not our child), so its last heartbeat (train) or its
//! step manifest (data steps) decides.

use std::path::Path;

use chrono::{DateTime, Utc};
use lavender::heartbeat::{self, WorkerState};

use crate::process::ExitOutcome;

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Success,
    /// Exited after a SIGTERM we did not send (its final heartbeat says `stopping`).
    StoppedExternally,
    Crash(String),
}

pub fn judge(
    step: &str,
    outcome: ExitOutcome,
    run_dir: Option<&Path>,
    data_root: &Path,
    started_at: Option<DateTime<Utc>>,
) -> Verdict {
    let final_state = run_dir
        .filter(|_| step == "train")
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
        ExitOutcome::Unknown if step == "train" => match final_state {
            Some(WorkerState::Finished) => Verdict::Success,
            Some(WorkerState::Stopping) => Verdict::StoppedExternally,
            Some(state) => Verdict::Crash(format!(
                "the worker vanished while its heartbeat said {state}"
            )),
            None => Verdict::Crash("the worker vanished and left no heartbeat".into()),
        },
        ExitOutcome::Unknown => {
            let finished = lavender::manifest::read(data_root, step)
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
