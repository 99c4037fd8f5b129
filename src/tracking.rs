//! Experiment trackers: one tracker run per lavender run lineage (the run a training
//! started with, followed by every run resumed from it: `crate::run::lineage_root`),
//! continued across restarts, resumes, requeues and daemon restarts.
//!
//! Two files per lineage under `state/tracking/`:
//! - [`Identity`] (`<lineage>.json`): the tracker runs' ids (the MLflow run, the W&B
//!   run id the worker is given). Written when an id is made, never changed after.
//! - [`Progress`] (`<lineage>.progress.json`): what each tracker has acknowledged:
//!   per metric the last step logged ([`Progress::fresh`] keeps each step once: a
//!   step replayed after a crash is not logged again; a rollback lowers the mark, so
//!   the retrained steps are), the supervision events logged, the params. Written
//!   only by the daemon's tracking task, after the tracker took a batch.
//!
//! The metrics come from the run's per-step record ([`crate::log_history::SIDECAR`]):
//! every line is untrusted, a key or value that is not a metric is skipped.

pub mod tensorboard;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{IoContext, Result};

#[cfg(test)]
mod tests;

/// `state/tracking/`.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("tracking")
}

/// A lineage name usable as a file name (`crate::run` names: `run-…`).
fn plain(name: &str) -> bool {
    (1..=200).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The most metrics one record line gives (the rest of the line is skipped).
pub const MAX_KEYS_PER_LINE: usize = 64;

/// One writer of the identity files at a time in this process (a launch and the
/// tracking task may both make one).
static IDENTITY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The tracker runs of one lineage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    pub lineage: String,
    /// The W&B run id (8 of `[a-z0-9]`), made with the identity.
    pub wandb_run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow: Option<MlflowRun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlflowRun {
    pub uri: String,
    pub experiment_id: String,
    pub run_id: String,
}

impl MlflowRun {
    /// The run's page in the MLflow UI.
    pub fn url(&self) -> String {
        format!(
            "{}/#/experiments/{}/runs/{}",
            self.uri.trim_end_matches('/'),
            self.experiment_id,
            self.run_id
        )
    }
}

impl Identity {
    pub fn path(state_dir: &Path, lineage: &str) -> Option<PathBuf> {
        plain(lineage).then(|| dir(state_dir).join(format!("{lineage}.json")))
    }

    /// The lineage's identity; `None` for none yet, or one that does not parse (a
    /// damaged file is never trusted: a new one replaces it).
    pub fn read(state_dir: &Path, lineage: &str) -> Option<Identity> {
        let bytes = std::fs::read(Identity::path(state_dir, lineage)?).ok()?;
        let id: Identity = serde_json::from_slice(&bytes).ok()?;
        let valid = id.lineage == lineage
            && id.wandb_run_id.len() == 8
            && id
                .wandb_run_id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && id.mlflow.as_ref().is_none_or(|m| {
                [&m.run_id, &m.experiment_id].iter().all(|s| {
                    (1..=64).contains(&s.len())
                        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
            });
        valid.then_some(id)
    }

    /// The lineage's identity, made (with a new W&B id) when there is none.
    pub fn read_or_make(state_dir: &Path, lineage: &str) -> Result<Identity> {
        let _one = IDENTITY.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = Identity::read(state_dir, lineage) {
            return Ok(id);
        }
        let id = Identity {
            lineage: lineage.to_string(),
            wandb_run_id: random_id(),
            mlflow: None,
        };
        id.write(state_dir)?;
        Ok(id)
    }

    /// Records the MLflow run made for the lineage, unless one was recorded since
    /// (then that one is kept and returned).
    pub fn set_mlflow(state_dir: &Path, lineage: &str, run: MlflowRun) -> Result<Identity> {
        let _one = IDENTITY.lock().unwrap_or_else(|e| e.into_inner());
        let mut id = Identity::read(state_dir, lineage).unwrap_or_else(|| Identity {
            lineage: lineage.to_string(),
            wandb_run_id: random_id(),
            mlflow: None,
        });
        if id.mlflow.as_ref().is_some_and(|m| m.uri == run.uri) {
            return Ok(id);
        }
        id.mlflow = Some(run);
        id.write(state_dir)?;
        Ok(id)
    }

    fn write(&self, state_dir: &Path) -> Result<()> {
        let Some(path) = Identity::path(state_dir, &self.lineage) else {
            return Ok(());
        };
        write_in(state_dir, &path, self)
    }
}

/// Writes `value` to `path` under `state/tracking/`, made if missing.
fn write_in(state_dir: &Path, path: &Path, value: &impl Serialize) -> Result<()> {
    let folder = dir(state_dir);
    std::fs::create_dir_all(&folder).ctx("create", &folder)?;
    crate::atomic::write_json(path, value)
}

/// 8 of `[a-z0-9]` from the system's random source (W&B's own id alphabet).
fn random_id() -> String {
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if read.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let mixed = nanos ^ (u128::from(std::process::id()) << 64);
        bytes.copy_from_slice(&mixed.to_le_bytes()[..8]);
    }
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// One metric value at one training step.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub key: String,
    pub step: u64,
    pub value: f64,
}

/// A metric's name as trackers take it: 1 to 100 of letters, digits and `_ - . /`.
pub fn metric_key(key: &str) -> bool {
    (1..=100).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b))
}

/// The metrics of one line of the per-step record: every finite number but the
/// step's own bookkeeping (`step`, `window`), under a valid name. A line without a
/// step, or that is not a JSON object, gives none.
pub fn points(line: &str) -> Vec<Point> {
    let Ok(Value::Object(entry)) = serde_json::from_str::<Value>(line) else {
        return Vec::new();
    };
    let Some(step) = entry.get("step").and_then(Value::as_u64) else {
        return Vec::new();
    };
    entry
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "step" | "window") && metric_key(k))
        .filter_map(|(k, v)| {
            let value = v.as_f64().filter(|x| x.is_finite())?;
            Some(Point {
                key: k.clone(),
                step,
                value,
            })
        })
        .take(MAX_KEYS_PER_LINE)
        .collect()
}

/// Where the tracking task has read a run's record to: the file (its inode: the
/// replay check's cut-back writes a new one) and the offset after the last line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordPosition {
    pub run: String,
    pub inode: u64,
    pub offset: u64,
}

/// What one tracker of one lineage has acknowledged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Per metric, the last step logged.
    #[serde(default)]
    pub through: BTreeMap<String, u64>,
    /// Rollbacks taken into account, per run (its `skipped.json`'s ranges).
    #[serde(default)]
    pub rollbacks: BTreeMap<String, usize>,
    /// When the tracker began following the lineage (RFC 3339): decisions before
    /// it are another lineage's.
    #[serde(default)]
    pub since: Option<String>,
    /// Supervision events logged so far.
    #[serde(default)]
    pub events: u64,
    /// The last decision logged as an event: its time and id.
    #[serde(default)]
    pub last_event: Option<(String, String)>,
    /// A replication-behind event said, and no caught-up one since.
    #[serde(default)]
    pub replication_behind: bool,
    /// The params logged (MLflow's are immutable: a changed value becomes a tag).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Config changes recorded as tags so far.
    #[serde(default)]
    pub config_changes: u64,
    /// The run's end as last told to the tracker (`FINISHED`, `FAILED`, `KILLED`).
    #[serde(default)]
    pub ended: Option<String>,
    #[serde(default)]
    pub record: RecordPosition,
}

impl Progress {
    pub fn path(state_dir: &Path, lineage: &str, tracker: &str) -> Option<PathBuf> {
        (plain(lineage) && plain(tracker))
            .then(|| dir(state_dir).join(format!("{lineage}.{tracker}.json")))
    }

    /// The tracker's progress for the lineage; a missing or unreadable file is none
    /// yet (a tracker told again what it had is told nothing new: MLflow keeps both
    /// values at one step, so the file is written after every batch).
    pub fn read(state_dir: &Path, lineage: &str, tracker: &str) -> Progress {
        Progress::path(state_dir, lineage, tracker)
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    pub fn write(&self, state_dir: &Path, lineage: &str, tracker: &str) -> Result<()> {
        let Some(path) = Progress::path(state_dir, lineage, tracker) else {
            return Ok(());
        };
        write_in(state_dir, &path, self)
    }

    /// Whether `p` is a step not logged yet (each step once).
    pub fn fresh(&self, p: &Point) -> bool {
        self.through.get(&p.key).is_none_or(|s| p.step > *s)
    }

    /// `p` acknowledged by the tracker.
    pub fn logged(&mut self, p: &Point) {
        let s = self.through.entry(p.key.clone()).or_insert(p.step);
        *s = (*s).max(p.step);
    }

    /// A rollback to `step`: the steps after it are trained again on other data,
    /// new values, each logged again.
    pub fn rolled_back_to(&mut self, step: u64) {
        for s in self.through.values_mut() {
            *s = (*s).min(step);
        }
    }
}

/// The environment a worker of `lineage` is given so that trackers it reports to
/// itself continue one run: W&B's run id and resume mode (and project, entity and
/// mode), MLflow's tracking URI, experiment and run id, TensorBoard's folder.
pub fn worker_env(
    config: &crate::config::TrackingConfig,
    identity: &Identity,
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    let mut set = |k: &str, v: &str| env.push((k.to_string(), v.to_string()));
    if let Some(w) = &config.wandb {
        set("WANDB_RUN_ID", &identity.wandb_run_id);
        set("WANDB_RESUME", "allow");
        set("WANDB_PROJECT", &w.project);
        set("WANDB_MODE", w.mode.as_str());
        if let Some(e) = &w.entity {
            set("WANDB_ENTITY", e);
        }
    }
    if let Some(m) = &config.mlflow {
        set("MLFLOW_TRACKING_URI", &m.uri);
        set("MLFLOW_EXPERIMENT_NAME", &m.experiment);
        if let Some(run) = identity.mlflow.as_ref().filter(|r| r.uri == m.uri) {
            set("MLFLOW_RUN_ID", &run.run_id);
        }
    }
    if let Some(tb) = &config.tensorboard {
        let folder = tb.dir.join(&identity.lineage);
        set("TENSORBOARD_LOGGING_DIR", &folder.to_string_lossy());
    }
    env
}

/// `state/tracking/status.json`: where the tracker runs of the pipeline's lineage
/// are, as the status shows them (written by the tracking task).
pub fn status_path(state_dir: &Path) -> PathBuf {
    dir(state_dir).join("status.json")
}

/// The status's `tracking`: links to the tracker runs, and a tracker that does not
/// answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrackingStatus {
    pub lineage: String,
    /// The MLflow run's page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow: Option<String>,
    /// The TensorBoard run's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<PathBuf>,
    /// The W&B run id the worker is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wandb: Option<String>,
    /// A tracker that did not take the last batch: since when (RFC 3339), and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
}

impl TrackingStatus {
    /// The status's tracking of `run_dir`'s lineage, if the task wrote one for it.
    pub fn read(state_dir: &Path, run_dir: &Path) -> Option<TrackingStatus> {
        let bytes = std::fs::read(status_path(state_dir)).ok()?;
        let s: TrackingStatus = serde_json::from_slice(&bytes).ok()?;
        (s.lineage == crate::run::lineage_root(run_dir)).then_some(s)
    }

    /// One line of `lavenderd status`.
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.mlflow {
            parts.push(format!("mlflow {m}"));
        }
        if let Some(t) = &self.tensorboard {
            parts.push(format!("tensorboard {}", t.display()));
        }
        if let Some(w) = &self.wandb {
            parts.push(format!("wandb run {w}"));
        }
        if let Some(u) = &self.unreachable {
            parts.push(format!("UNREACHABLE {u}"));
        }
        parts.join(" · ")
    }
}
