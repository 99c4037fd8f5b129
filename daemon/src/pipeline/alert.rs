//! Alerts: what an operator must hear about. For now they are logged; a
//! notifications module will subscribe to the same channel.

use std::time::Duration;

use tokio::sync::mpsc;

use crate::process::ExitOutcome;

#[derive(Debug, Clone, PartialEq)]
pub enum Alert {
    /// A step died without being asked to; a restart follows after `restart_in`.
    Crashed {
        step: String,
        outcome: ExitOutcome,
        restart: u32,
        max_restarts: u32,
        restart_in: Duration,
    },
    /// Restarts exhausted (or the worker cannot start): the pipeline stopped.
    Failed { step: String, reason: String },
    /// The heartbeat is older than `stale_after_s`.
    Stale { step: String, age_s: Option<u64> },
    /// A worker outlived a daemon restart and is supervised again.
    Adopted { step: String, pid: u32 },
    /// The worker was stopped by someone else (it saved and exited on SIGTERM).
    StoppedExternally { step: String },
}

impl std::fmt::Display for Alert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Alert::Crashed {
                step,
                outcome,
                restart,
                max_restarts,
                restart_in,
            } => write!(
                f,
                "step {step} crashed ({outcome}); restart {restart}/{max_restarts} from the latest checkpoint in {:.1}s",
                restart_in.as_secs_f64()
            ),
            Alert::Failed { step, reason } => write!(f, "pipeline failed at step {step}: {reason}"),
            Alert::Stale { step, age_s } => match age_s {
                Some(age) => write!(f, "step {step}: heartbeat is stale ({age}s old)"),
                None => write!(f, "step {step}: no heartbeat yet after the start-up grace"),
            },
            Alert::Adopted { step, pid } => {
                write!(
                    f,
                    "re-adopted the running worker of step {step} (pid {pid})"
                )
            }
            Alert::StoppedExternally { step } => {
                write!(
                    f,
                    "step {step} was stopped outside lavenderd (SIGTERM); pipeline stopped"
                )
            }
        }
    }
}

pub type AlertSender = mpsc::UnboundedSender<Alert>;

/// The default sink: one `ALERT` log line per alert.
pub fn spawn_log_sink() -> AlertSender {
    let (tx, mut rx) = mpsc::unbounded_channel::<Alert>();
    tokio::spawn(async move {
        while let Some(alert) = rx.recv().await {
            tracing::warn!("ALERT {alert}");
        }
    });
    tx
}
