//! Signals to a job. A graceful stop is `scancel --signal=TERM <job>`, which reaches
//! every job step (the worker under `srun`) but not the batch shell. `--full` would
//! also signal the batch shell and its children, and `srun` answers a SIGTERM by
//! killing its tasks at once, before the worker could save. A job that has not
//! started yet has nothing to save and is cancelled outright; SIGKILL cancels.

use nix::sys::signal::Signal;

use super::query::{self, JobInfo};

pub fn signal(job_id: &str, signal: Signal) -> bool {
    let pending = matches!(
        query::look(job_id),
        JobInfo::Active { ref state, .. } if state == "PENDING" || state.starts_with("REQUEUE")
    );
    let result = if signal == Signal::SIGKILL || pending {
        cancel(job_id)
    } else {
        let name = signal.as_str().trim_start_matches("SIG");
        super::run("scancel", &[format!("--signal={name}"), job_id.to_string()]).map(|_| ())
    };
    match result {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(job_id, "{e:#}");
            false
        }
    }
}

/// Ends the job now: KILL to its steps and the batch shell, then `scancel`.
pub fn cancel(job_id: &str) -> anyhow::Result<()> {
    let _ = super::run(
        "scancel",
        &["--signal=KILL".into(), "--full".into(), job_id.to_string()],
    );
    super::run("scancel", &[job_id.to_string()]).map(|_| ())
}
