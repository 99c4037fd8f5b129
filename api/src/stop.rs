//! `POST /pipeline/stop`: SIGTERM, wait for the save, SIGKILL after the timeout;
//! the answer says what the stop saved.

use std::path::PathBuf;

use lavender::config::PipelineStep;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopRequest {
    /// Seconds between SIGTERM and SIGKILL; default `supervisor.stop_timeout_s`.
    pub timeout_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopReport {
    /// A worker was running (or a restart was pending) when the stop came.
    pub was_running: bool,
    pub step: Option<PipelineStep>,
    /// The checkpoint written because of this stop, if any.
    pub saved_checkpoint: Option<PathBuf>,
    /// The newest complete checkpoint now (what `--resume latest` would use).
    pub latest_checkpoint: Option<PathBuf>,
    /// The worker ignored SIGTERM past the timeout and was killed.
    pub killed: bool,
    /// Nothing had trained since the worker's last save: the stop wrote nothing, and
    /// `latest_checkpoint` holds the worker's state as it stopped.
    #[serde(default)]
    pub nothing_to_save: bool,
    pub message: String,
}

impl StopReport {
    /// Nothing was running; `latest` is the newest complete checkpoint.
    pub fn idle(latest: Option<PathBuf>) -> StopReport {
        StopReport {
            was_running: false,
            step: None,
            saved_checkpoint: None,
            message: match &latest {
                Some(p) => format!(
                    "nothing was running; newest complete checkpoint: {}",
                    p.display()
                ),
                None => "nothing was running; there is no complete checkpoint".into(),
            },
            latest_checkpoint: latest,
            killed: false,
            nothing_to_save: false,
        }
    }
}
