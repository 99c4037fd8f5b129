//! The `tracking:` section: one experiment-tracker run per lavender run lineage, in
//! MLflow, TensorBoard and Weights & Biases. The daemon writes to MLflow and to
//! TensorBoard event files itself (daemon/src/tracking/); W&B (and MLflow or
//! TensorBoard when the worker reports to them itself) gets the identity through the
//! worker's environment. This is only what the operator asked for, checked.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, ConfigErrorKind};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrackingConfig {
    /// An MLflow tracking server; null = none.
    pub mlflow: Option<MlflowConfig>,
    /// A folder of TensorBoard runs (one sub-folder per lineage); null = none.
    pub tensorboard: Option<TensorboardConfig>,
    /// A W&B project the worker reports to itself; null = none.
    pub wandb: Option<WandbConfig>,
}

impl TrackingConfig {
    pub fn is_default(&self) -> bool {
        *self == TrackingConfig::default()
    }

    /// Whether any tracker is configured.
    pub fn any(&self) -> bool {
        !self.is_default()
    }
}

/// Who writes a tracker's training metrics: one writer per metric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricsWriter {
    /// The daemon, from the run's per-step record.
    #[default]
    Daemon,
    /// The worker itself (e.g. the Hugging Face Trainer's `report_to`): the daemon
    /// adds the supervision events and the goodput only.
    Worker,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlflowConfig {
    /// The tracking server's URL, `http://host:port` (credentials in the daemon's
    /// `MLFLOW_TRACKING_TOKEN` or `MLFLOW_TRACKING_USERNAME`/`_PASSWORD`).
    pub uri: String,
    /// The experiment's name; created when missing.
    #[serde(default = "default_experiment")]
    pub experiment: String,
    #[serde(default)]
    pub metrics: MetricsWriter,
}

fn default_experiment() -> String {
    "lavender".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorboardConfig {
    /// The folder TensorBoard is pointed at (`tensorboard --logdir DIR`).
    pub dir: PathBuf,
    #[serde(default)]
    pub metrics: MetricsWriter,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WandbMode {
    #[default]
    Online,
    Offline,
    Disabled,
}

impl WandbMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WandbMode::Online => "online",
            WandbMode::Offline => "offline",
            WandbMode::Disabled => "disabled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WandbConfig {
    pub project: String,
    #[serde(default)]
    pub entity: Option<String>,
    #[serde(default)]
    pub mode: WandbMode,
}

fn invalid(path: &str, message: String) -> ConfigError {
    ConfigError::new(ConfigErrorKind::Invalid {
        path: path.into(),
        message,
    })
}

/// A W&B project or entity name: 1 to 128 of `[A-Za-z0-9._-]`.
fn plain_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

pub(crate) fn validate(t: &TrackingConfig) -> Result<(), ConfigError> {
    if let Some(m) = &t.mlflow {
        let Some((scheme, rest)) = m.uri.split_once("://") else {
            return Err(invalid(
                "tracking.mlflow.uri",
                format!(
                    "{:?} is not a URL; write the server's, e.g. http://127.0.0.1:5000",
                    m.uri
                ),
            ));
        };
        if !matches!(scheme, "http" | "https") || rest.is_empty() {
            return Err(invalid(
                "tracking.mlflow.uri",
                format!(
                    "{:?}: the daemon talks to an MLflow server over http(s); write http://host:port",
                    m.uri
                ),
            ));
        }
        if rest.split('/').next().is_some_and(|h| h.contains('@')) || rest.contains('?') {
            return Err(invalid(
                "tracking.mlflow.uri",
                "carries credentials or a query; put credentials in MLFLOW_TRACKING_TOKEN (or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD) in the daemon's environment".into(),
            ));
        }
        if m.experiment.trim().is_empty()
            || m.experiment.len() > 256
            || m.experiment.chars().any(char::is_control)
        {
            return Err(invalid(
                "tracking.mlflow.experiment",
                format!(
                    "{:?}: name the experiment in 1 to 256 printable characters",
                    m.experiment
                ),
            ));
        }
    }
    if let Some(tb) = &t.tensorboard
        && tb.dir.as_os_str().is_empty()
    {
        return Err(invalid(
            "tracking.tensorboard.dir",
            "name the folder TensorBoard reads (tensorboard --logdir DIR)".into(),
        ));
    }
    if let Some(w) = &t.wandb {
        if !plain_name(&w.project) {
            return Err(invalid(
                "tracking.wandb.project",
                format!(
                    "{:?}: write 1 to 128 letters, digits, `.`, `_` or `-`",
                    w.project
                ),
            ));
        }
        if let Some(e) = &w.entity
            && !plain_name(e)
        {
            return Err(invalid(
                "tracking.wandb.entity",
                format!("{e:?}: write 1 to 128 letters, digits, `.`, `_` or `-` (or null)"),
            ));
        }
    }
    Ok(())
}
