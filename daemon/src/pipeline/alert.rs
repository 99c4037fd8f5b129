//! Alerts: what an operator must hear about. The sink logs each one and turns it
//! into pushes on the configured notification channels.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::notify::{AlertKind, ExitReason, Notifier, alert as push, log_tail};
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
        /// The worker's log, quoted in the push.
        log_file: Option<PathBuf>,
    },
    /// Restarts exhausted (or the worker cannot start): the pipeline stopped.
    Failed {
        step: String,
        reason: String,
        restarts: u32,
        last_exit: Option<ExitOutcome>,
    },
    /// The heartbeat is older than `stale_after_s`.
    Stale {
        step: String,
        age_s: Option<u64>,
        stale_after_s: u64,
        training_step: Option<u64>,
    },
    /// A fresh heartbeat after a stale one.
    Recovered {
        step: String,
        stalled_for: Option<Duration>,
        training_step: Option<u64>,
    },
    /// Every step is done.
    Finished {
        duration: Duration,
        final_loss: Option<f64>,
        final_checkpoint: Option<String>,
    },
    /// Free space on the data root's filesystem fell under `need_bytes`.
    DiskLow {
        path: PathBuf,
        avail_bytes: u64,
        need_bytes: u64,
    },
    /// A worker outlived a daemon restart and is supervised again.
    Adopted { step: String, worker: String },
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
                ..
            } => write!(
                f,
                "step {step} crashed ({outcome}); restart {restart}/{max_restarts} from the latest checkpoint in {:.1}s",
                restart_in.as_secs_f64()
            ),
            Alert::Failed { step, reason, .. } => {
                write!(f, "pipeline failed at step {step}: {reason}")
            }
            Alert::Stale { step, age_s, .. } => match age_s {
                Some(age) => write!(f, "step {step}: heartbeat is stale ({age}s old)"),
                None => write!(f, "step {step}: no heartbeat yet after the start-up grace"),
            },
            Alert::Adopted { step, worker } => {
                write!(f, "re-adopted the running worker of step {step} ({worker})")
            }
            Alert::StoppedExternally { step } => {
                write!(
                    f,
                    "step {step} was stopped outside lavenderd (SIGTERM); pipeline stopped"
                )
            }
            Alert::Recovered { step, .. } => write!(f, "step {step}: heartbeat is fresh again"),
            Alert::Finished { duration, .. } => {
                write!(f, "pipeline finished after {:.0}s", duration.as_secs_f64())
            }
            Alert::DiskLow {
                path,
                avail_bytes,
                need_bytes,
            } => write!(
                f,
                "disk low under {}: {avail_bytes} bytes free, {need_bytes} needed",
                path.display()
            ),
        }
    }
}

impl Alert {
    /// False for what is worth hearing but not a problem: the pipeline finished, a
    /// heartbeat recovered, a worker was re-adopted.
    pub fn is_bad_news(&self) -> bool {
        !matches!(
            self,
            Alert::Finished { .. } | Alert::Recovered { .. } | Alert::Adopted { .. }
        )
    }
}

pub type AlertSender = mpsc::UnboundedSender<Alert>;

/// The sink: one `ALERT` log line per alert, and its pushes (if any) queued on
/// `notifier`. `log_lines`: lines of the worker log quoted in a crash push.
pub fn spawn_sink(notifier: Option<Notifier>, log_lines: usize) -> AlertSender {
    let (tx, mut rx) = mpsc::unbounded_channel::<Alert>();
    tokio::spawn(async move {
        while let Some(alert) = rx.recv().await {
            if alert.is_bad_news() {
                tracing::warn!(target: crate::logging::ALERT_TARGET, "ALERT {alert}");
            } else {
                tracing::info!(target: crate::logging::ALERT_TARGET, "{alert}");
            }
            if let Some(n) = &notifier {
                for kind in kinds(&alert, log_lines) {
                    n.send(push(kind, n.prefix()));
                }
            }
        }
    });
    tx
}

/// The default sink without notifications: one `ALERT` log line per alert.
pub fn spawn_log_sink() -> AlertSender {
    spawn_sink(None, 0)
}

fn exit_reason(outcome: ExitOutcome) -> Option<ExitReason> {
    match outcome {
        ExitOutcome::Code(c) => Some(ExitReason::Code(c)),
        ExitOutcome::Signal(s) => Some(ExitReason::Signal(s)),
        ExitOutcome::Unknown => None,
    }
}

/// The pushes an alert makes, in order (a crash is "crashed" then "restarting").
pub fn kinds(alert: &Alert, log_lines: usize) -> Vec<AlertKind> {
    match alert {
        Alert::Crashed {
            outcome,
            restart,
            max_restarts,
            restart_in,
            log_file,
            ..
        } => {
            let mut out = Vec::new();
            if let Some(exit) = exit_reason(*outcome) {
                out.push(AlertKind::Crashed {
                    exit,
                    log_tail: log_file
                        .as_deref()
                        .map(|p| log_tail(p, log_lines))
                        .unwrap_or_default(),
                });
            }
            out.push(AlertKind::Restarting {
                attempt: *restart,
                max: *max_restarts,
                delay: *restart_in,
            });
            out
        }
        Alert::Failed {
            restarts,
            last_exit,
            ..
        } => vec![AlertKind::Failed {
            restarts: *restarts,
            last_exit: last_exit.and_then(exit_reason),
        }],
        Alert::Stale {
            age_s,
            stale_after_s,
            training_step,
            ..
        } => vec![AlertKind::Stalled {
            heartbeat_age: Duration::from_secs(age_s.unwrap_or(*stale_after_s)),
            stale_after_s: *stale_after_s,
            step: *training_step,
        }],
        Alert::Recovered {
            stalled_for,
            training_step,
            ..
        } => vec![AlertKind::Recovered {
            stalled_for: *stalled_for,
            step: *training_step,
        }],
        Alert::Finished {
            duration,
            final_loss,
            final_checkpoint,
        } => vec![AlertKind::Finished {
            duration: *duration,
            final_loss: *final_loss,
            final_checkpoint: final_checkpoint.clone(),
        }],
        Alert::DiskLow {
            path,
            avail_bytes,
            need_bytes,
        } => vec![AlertKind::DiskLow {
            path: path.clone(),
            avail_bytes: *avail_bytes,
            need_bytes: *need_bytes,
        }],
        // Logged only: an adoption or an operator's own stop needs no push.
        Alert::Adopted { .. } | Alert::StoppedExternally { .. } => Vec::new(),
    }
}
