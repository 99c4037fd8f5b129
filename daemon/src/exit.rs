//! How a worker ended: the one type the backends report, the pipeline judges, the
//! alerts carry and the pushes spell out. A leaf, below the backends and the alerts.

use std::os::unix::process::ExitStatusExt as _;
use std::pin::Pin;
use std::process::ExitStatus;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitOutcome {
    Code(i32),
    Signal(i32),
    /// Not our child (re-adopted after a daemon restart): only its absence is known.
    Unknown,
}

impl ExitOutcome {
    pub fn from_status(status: ExitStatus) -> ExitOutcome {
        match (status.code(), status.signal()) {
            (Some(code), _) => ExitOutcome::Code(code),
            (None, Some(sig)) => ExitOutcome::Signal(sig),
            (None, None) => ExitOutcome::Unknown,
        }
    }

    /// Whether the way it ended is known (our child, or a job Slurm remembers).
    pub fn is_known(self) -> bool {
        self != ExitOutcome::Unknown
    }
}

impl std::fmt::Display for ExitOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ExitOutcome::Code(code) => write!(f, "exit code {code}"),
            ExitOutcome::Signal(sig) => match nix::sys::signal::Signal::try_from(sig) {
                Ok(name) => write!(f, "killed by {name} (signal {sig})"),
                Err(_) => write!(f, "killed by signal {sig}"),
            },
            ExitOutcome::Unknown => f.write_str("exit status unknown (not our child)"),
        }
    }
}

/// Resolves when a launched worker ends, with how it ended.
pub type ExitFuture = Pin<Box<dyn Future<Output = ExitOutcome> + Send>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts() {
        assert_eq!(ExitOutcome::Code(1).to_string(), "exit code 1");
        assert_eq!(
            ExitOutcome::Signal(9).to_string(),
            "killed by SIGKILL (signal 9)"
        );
        assert_eq!(ExitOutcome::Signal(250).to_string(), "killed by signal 250");
    }
}
