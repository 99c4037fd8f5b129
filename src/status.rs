//! The status contract: `GET /status` and `lavenderd status --json` serialize
//! [`Status`], which has exactly the keys of `shared/schemas/status.schema.json`
//! plus the added keys `schema_version`, `pipeline.state`, `pipeline.restarts`,
//! `pipeline.slurm` (version 2), `training.stage`, `training.epoch`,
//! `training.heartbeat_error`, `notices` and `data.shards_wanted` (version 3),
//! `pipeline.recovery` and `pipeline.failure` (version 4).
//! A value that is not known is `null`, never a made-up number.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Number;

use crate::config::{PipelineStep, Scale, ShardShortfall};
use crate::failure::Failure;
use crate::heartbeat::Heartbeat;
use crate::skips::SkipRange;

/// Version of the status document; bumped when a key is added.
pub const SCHEMA_VERSION: u32 = 4;

/// The whole status document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// RFC 3339 UTC with a `Z` suffix.
    pub timestamp: String,
    pub pipeline: PipelineStatus,
    pub active_step: Option<PipelineStep>,
    pub steps: BTreeMap<String, StepState>,
    pub training: TrainingStatus,
    pub data: DataStatus,
    pub disk: DiskStatus,
    pub schema_version: u32,
    /// One line each about something the operator should know that is not an
    /// error: the corpus filling fewer shards than the scale asks for. Empty when
    /// there is nothing to say.
    #[serde(default)]
    pub notices: Vec<String>,
    /// Where the run's wall time went (the daemon's ledger, `state/goodput.json`);
    /// absent before the ledger counted anything of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<crate::goodput::GoodputStatus>,
    /// The experiment-tracker runs of the pipeline's lineage (`tracking:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracking: Option<crate::tracking::TrackingStatus>,
}

/// State of the pipeline as the daemon's state machine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PipelineState {
    Idle,
    Running,
    Stopping,
    Stopped,
    Finished,
    Crashed,
    Failed,
    /// A save found the disk full: no worker, resumed by the daemon once the next
    /// save fits (`pipeline.disk_wait` says where and how much).
    #[serde(rename = "waiting_for_disk")]
    WaitingForDisk,
}

impl PipelineState {
    pub fn as_str(self) -> &'static str {
        match self {
            PipelineState::Idle => "idle",
            PipelineState::Running => "running",
            PipelineState::Stopping => "stopping",
            PipelineState::Stopped => "stopped",
            PipelineState::Finished => "finished",
            PipelineState::Crashed => "crashed",
            PipelineState::Failed => "failed",
            PipelineState::WaitingForDisk => "waiting_for_disk",
        }
    }
}

impl std::fmt::Display for PipelineState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineStatus {
    /// True while a pipeline process (a step or the worker) is alive.
    pub running: bool,
    pub pid: Option<u32>,
    pub chunk: Option<String>,
    pub scale: Option<String>,
    pub state: PipelineState,
    /// Automatic restarts after a crash in this pipeline run.
    pub restarts: u32,
    /// The Slurm job of the active step (`launch.backend: slurm`); null otherwise.
    #[serde(default)]
    pub slurm: Option<SlurmJobStatus>,
    /// The last time the daemon brought this run back by itself (a hung or failed
    /// worker restarted, a run resumed after the daemon's exit or a power loss);
    /// null when it never had to.
    #[serde(default)]
    pub recovery: Option<Recovery>,
    /// Why the last worker of this run failed, as it said (or its exit code said);
    /// null when none failed.
    #[serde(default)]
    pub failure: Option<Failure>,
    /// The run's rollbacks after a divergence, oldest first: each the checkpoint it
    /// went back to (`from_step`), the step the divergence was detected at
    /// (`to_step`; the data in between is skipped), why and when. Empty when none.
    #[serde(default)]
    pub rollbacks: Vec<SkipRange>,
    /// Why the pipeline last crashed or failed, as the daemon said it (e.g. "…;
    /// gave up after 2 rollback(s) (supervisor.max_rollbacks)"); null otherwise.
    #[serde(default)]
    pub last_error: Option<String>,
    /// The runs that together trained the pipeline's run, oldest first, this one
    /// last, when it resumed another run (`<run>/lineage.json`); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lineage: Vec<String>,
    /// While the state is `waiting_for_disk`: the filesystem, the bytes the next
    /// save needs and those free at the last check; null otherwise.
    #[serde(default)]
    pub disk_wait: Option<DiskWait>,
}

/// `pipeline.disk_wait`: a save found the disk full (`ENOSPC`, or `EDQUOT` for a
/// quota) and the pipeline waits until `need_bytes` are free under `path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskWait {
    /// The data root, whose filesystem holds the run's checkpoints.
    pub path: std::path::PathBuf,
    /// The next save's size × 1.1 + `notify.disk_floor_mib` (more than was free
    /// when the save failed, when that estimate fell short).
    pub need_bytes: u64,
    /// Free at the last check (every few seconds while waiting).
    pub free_bytes: Option<u64>,
    /// RFC 3339 UTC: when the wait began.
    pub since: String,
    /// One line for a person: why, and what would end it.
    pub message: String,
}

/// Why the daemon brought a run back by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryReason {
    /// The worker stopped beating: killed and restarted.
    Hung,
    /// The worker failed (crashed, ran out of memory, …): restarted.
    Failed,
    /// The daemon was told to exit (SIGTERM/SIGINT: a service restart, a shutdown);
    /// its next start resumed the run.
    DaemonExit,
    /// The daemon and the worker were gone without a word (a power loss, a reboot,
    /// both killed); the next start resumed the run.
    PowerLoss,
    /// The loss diverged: the run went back to the checkpoint before the
    /// divergence, skipping the data that led to it (`on_diverged: rollback`).
    RolledBack,
}

impl RecoveryReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryReason::Hung => "hung",
            RecoveryReason::Failed => "failed",
            RecoveryReason::DaemonExit => "daemon_exit",
            RecoveryReason::PowerLoss => "power_loss",
            RecoveryReason::RolledBack => "rolled_back",
        }
    }
}

/// `pipeline.recovery`: what the daemon did, when, and from which checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovery {
    pub reason: RecoveryReason,
    /// One line for a person: "hung at step 40 for 2 min; restarted from pretrain-…".
    pub message: String,
    /// RFC 3339 UTC.
    pub at: String,
    /// The checkpoint the worker was restarted from (its directory name); null when
    /// the run had none yet and started over.
    pub checkpoint: Option<String>,
}

/// Where and how the active step's Slurm job is, as last seen by the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJobStatus {
    pub job_id: String,
    /// The node the batch script runs on; null while pending.
    pub node: Option<String>,
    /// Slurm's job state (PENDING, RUNNING, REQUEUED, COMPLETING, …).
    pub state: Option<String>,
    /// Why a pending job waits (Slurm's `Reason`: BeginTime, Resources, …); null
    /// while it runs.
    #[serde(default)]
    pub reason: Option<String>,
    /// Every node of the job's allocation (`NodeList`, expanded), the batch node
    /// first; empty while pending.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// What the daemon saw happen to the job, for a person: "node n2 lost at step
    /// 120; waiting for 2 nodes" while a job that lost a node waits; null otherwise.
    #[serde(default)]
    pub message: Option<String>,
}

/// State of one pipeline step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepState {
    Done,
    Running,
    Pending,
    Failed,
    Skipped,
}

impl StepState {
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Done => "done",
            StepState::Running => "running",
            StepState::Pending => "pending",
            StepState::Failed => "failed",
            StepState::Skipped => "skipped",
        }
    }
}

impl std::fmt::Display for StepState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `training` block, derived from the heartbeat and the checkpoint listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingStatus {
    pub step: Option<u64>,
    pub total_steps: Option<u64>,
    pub pct: Option<f64>,
    pub loss: Option<f64>,
    pub loss_smooth: Option<f64>,
    pub lr: Option<f64>,
    pub steps_per_sec: Option<f64>,
    pub eta_seconds: Option<u64>,
    pub eta_hours: Option<f64>,
    pub heartbeat_age_s: Option<u64>,
    pub heartbeat_stale: bool,
    /// True while the worker process is alive and has not finished or failed.
    pub running: bool,
    pub checkpoints: u64,
    pub latest_checkpoint: Option<String>,
    /// Added keys: the newest checkpoint the daemon read back and found matching its
    /// manifest, and how many of the run's do (`checkpoint::verdicts`).
    #[serde(default)]
    pub latest_verified_checkpoint: Option<String>,
    #[serde(default)]
    pub verified_checkpoints: u64,
    /// Added key: the last resume's replay check (`lavender::replay`): steps
    /// compared, the largest difference, the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::replay::ReplayStatus>,
    pub stage: Option<String>,
    pub epoch: Option<f64>,
    /// Why the heartbeat file could not be read (empty, truncated, …), if so.
    pub heartbeat_error: Option<String>,
}

impl TrainingStatus {
    /// Nothing known: no heartbeat, no worker, no checkpoints.
    pub fn unknown() -> TrainingStatus {
        TrainingStatus {
            step: None,
            total_steps: None,
            pct: None,
            loss: None,
            loss_smooth: None,
            lr: None,
            steps_per_sec: None,
            eta_seconds: None,
            eta_hours: None,
            heartbeat_age_s: None,
            heartbeat_stale: false,
            running: false,
            checkpoints: 0,
            latest_checkpoint: None,
            latest_verified_checkpoint: None,
            verified_checkpoints: 0,
            replay: None,
            stage: None,
            epoch: None,
            heartbeat_error: None,
        }
    }

    /// The `training` block from what the daemon knows.
    ///
    /// - `hb`: `None` when there is no heartbeat file, `Some(Err(text))` when it
    ///   exists but cannot be read (the text becomes `heartbeat_error`).
    /// - `heartbeat_stale`: the daemon's verdict (`stale`): the live worker has not
    ///   written a heartbeat within the allowance of the phase it is in.
    /// - `running` is true when the worker process is alive and its last state is
    ///   not finished/failed.
    /// - `latest_checkpoint` (from the checkpoint listing) wins over the
    ///   heartbeat's own field.
    pub fn from_heartbeat(
        hb: Option<Result<Heartbeat, String>>,
        now: DateTime<Utc>,
        stale: bool,
        worker_alive: bool,
        checkpoints: u64,
        latest_checkpoint: Option<String>,
    ) -> TrainingStatus {
        let mut t = TrainingStatus {
            checkpoints,
            latest_checkpoint,
            heartbeat_stale: stale && worker_alive,
            ..TrainingStatus::unknown()
        };
        let hb = match hb {
            Some(Ok(hb)) => hb,
            Some(Err(error)) => {
                t.heartbeat_error = Some(error);
                t.running = worker_alive;
                return t;
            }
            None => {
                t.running = worker_alive;
                return t;
            }
        };

        let total = (hb.total_steps > 0).then_some(hb.total_steps);
        t.step = Some(hb.step);
        t.total_steps = total;
        t.pct =
            total.map(|total| round2((hb.step as f64 / total as f64 * 100.0).clamp(0.0, 100.0)));
        t.loss = hb.loss.filter(|x| x.is_finite());
        t.loss_smooth = hb.loss_smooth.filter(|x| x.is_finite());
        t.lr = non_negative(hb.lr);
        t.steps_per_sec = non_negative(hb.steps_per_sec);
        t.eta_seconds = hb.eta_seconds;
        t.eta_hours = hb.eta_seconds.map(|s| round2(s as f64 / 3600.0));
        t.stage = Some(hb.stage.clone()).filter(|s| !s.is_empty());
        t.epoch = non_negative(hb.epoch);
        if t.latest_checkpoint.is_none() {
            t.latest_checkpoint = hb.latest_checkpoint.clone();
        }

        let age = hb
            .time()
            .map(|at| u64::try_from((now - at).num_seconds()).unwrap_or(0));
        t.heartbeat_age_s = age;
        if age.is_none() {
            t.heartbeat_error = Some(format!(
                "heartbeat timestamp {:?} is not RFC 3339",
                hb.timestamp
            ));
        }
        t.running = worker_alive && !hb.state.is_terminal();
        t
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A finite, non-negative value, else `None` (the schema forbids negatives).
fn non_negative(x: Option<f64>) -> Option<f64> {
    x.filter(|x| x.is_finite() && *x >= 0.0)
}

/// The `data` block: `shard_count` and `checkpoints` always, plus every count
/// the step manifests know (`documents`, `tokens`, …), `null` when unknown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataStatus {
    /// Number of shards built (0 until build_shards has written its manifest).
    pub shard_count: u64,
    /// Complete checkpoints of the current run.
    pub checkpoints: u64,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Option<Number>>,
}

impl DataStatus {
    /// From `manifest::data_counts` and the checkpoint count.
    pub fn from_counts(counts: BTreeMap<String, Option<u64>>, checkpoints: u64) -> DataStatus {
        let mut extra: BTreeMap<String, Option<Number>> = counts
            .into_iter()
            .map(|(k, v)| (k, v.map(Number::from)))
            .collect();
        let shard_count = extra
            .remove("shard_count")
            .flatten()
            .and_then(|n| n.as_u64())
            .unwrap_or(0);
        extra.remove("checkpoints");
        DataStatus {
            shard_count,
            checkpoints,
            extra,
        }
    }
}

impl DataStatus {
    /// Adds `shards_wanted` (`wanted`: the preset's shards at `scale`) and, when the
    /// shards built so far (`shards_available`) are fewer, returns the one-line notice.
    pub fn note_shards_wanted(&mut self, scale: Scale, wanted: u64) -> Option<String> {
        self.extra
            .insert("shards_wanted".into(), Some(Number::from(wanted)));
        let available = self.extra.get("shards_available")?.as_ref()?.as_u64()?;
        ShardShortfall::check(scale, wanted, available).map(|s| s.to_string())
    }
}

/// The `disk` block for the volume holding the data root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskStatus {
    pub device: Option<String>,
    pub used_gib: Option<f64>,
    pub avail_gib: Option<f64>,
    /// Added keys: the next save's size as the newest checkpoint's, and the seconds
    /// until the volume is full at the last hour's net rate (`compose::DiskTrend`).
    #[serde(default)]
    pub next_save_bytes: Option<u64>,
    #[serde(default)]
    pub time_to_full_s: Option<u64>,
}

impl DiskStatus {
    pub fn unknown() -> DiskStatus {
        DiskStatus {
            device: None,
            used_gib: None,
            avail_gib: None,
            next_save_bytes: None,
            time_to_full_s: None,
        }
    }

    /// From byte counts, in GiB rounded to 0.1.
    pub fn from_bytes(device: Option<String>, used: u64, avail: u64) -> DiskStatus {
        let gib = |b: u64| (b as f64 / (1u64 << 30) as f64 * 10.0).round() / 10.0;
        DiskStatus {
            device,
            used_gib: Some(gib(used)),
            avail_gib: Some(gib(avail)),
            next_save_bytes: None,
            time_to_full_s: None,
        }
    }
}

impl Status {
    /// The steps of the status's map (kept by name) in the pipeline's order; a name
    /// that is not a pipeline step comes after them.
    pub fn ordered_steps(&self) -> Vec<(&str, StepState)> {
        let mut steps: Vec<(&str, StepState)> = self
            .steps
            .iter()
            .map(|(name, state)| (name.as_str(), *state))
            .collect();
        steps.sort_by_key(|(name, _)| PipelineStep::display_rank(name));
        steps
    }

    /// The status of a data root where nothing has run yet: every key present,
    /// every unknown value `null`, no steps.
    pub fn never_started(now: DateTime<Utc>) -> Status {
        Status {
            timestamp: crate::time::rfc3339_z(now),
            pipeline: PipelineStatus {
                running: false,
                pid: None,
                chunk: None,
                scale: None,
                state: PipelineState::Idle,
                restarts: 0,
                slurm: None,
                recovery: None,
                failure: None,
                rollbacks: Vec::new(),
                last_error: None,
                lineage: Vec::new(),
                disk_wait: None,
            },
            active_step: None,
            steps: BTreeMap::new(),
            training: TrainingStatus::unknown(),
            data: DataStatus {
                shard_count: 0,
                checkpoints: 0,
                extra: BTreeMap::new(),
            },
            disk: DiskStatus::unknown(),
            schema_version: SCHEMA_VERSION,
            notices: Vec::new(),
            goodput: None,
            tracking: None,
        }
    }

    /// The human-readable view of `lavenderd status`.
    pub fn to_text(&self) -> String {
        let p = &self.pipeline;
        let t = &self.training;
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };

        let pid = p.pid.map_or(String::new(), |pid| format!(" (pid {pid})"));
        line(format!("lavender status at {}", self.timestamp));
        line(format!(
            "pipeline:    {}{pid} · chunk {} · scale {} · restarts {}",
            p.state,
            opt(&p.chunk),
            opt(&p.scale),
            p.restarts
        ));
        if let Some(r) = &p.recovery {
            line(format!("recovered:   {} (at {})", r.message, r.at));
        }
        if let Some(f) = &p.failure {
            line(format!("failure:     {}: {}", f.kind, f.message));
        }
        if let Some(w) = &p.disk_wait {
            line(format!("waiting:     {} (since {})", w.message, w.since));
        }
        if let Some(j) = &p.slurm {
            let mut job = format!("slurm:       job {} {}", j.job_id, opt(&j.state));
            if !j.nodes.is_empty() {
                let _ = write!(job, " on {}", j.nodes.join(", "));
            }
            if let Some(reason) = &j.reason {
                let _ = write!(job, " ({reason})");
            }
            line(job);
            if let Some(message) = &j.message {
                line(format!("             {message}"));
            }
        }
        line(format!("active step: {}", opt(&self.active_step)));
        if !self.steps.is_empty() {
            let steps = ordered_steps(&self.steps)
                .map(|(name, state)| format!("{name} {state}"))
                .collect::<Vec<_>>()
                .join(" · ");
            line(format!("steps:       {steps}"));
        }
        let worker = if t.running { "running" } else { "not running" };
        let mut training = format!("training:    worker {worker}");
        if let Some(stage) = &t.stage {
            let _ = write!(training, " · stage {stage}");
        }
        if let Some(epoch) = t.epoch {
            let _ = write!(training, " · epoch {epoch:.2}");
        }
        line(training);
        line(format!(
            "step:        {} / {} ({})",
            opt(&t.step),
            opt(&t.total_steps),
            t.pct.map_or("-".into(), |p| format!("{p:.1}%"))
        ));
        line(format!(
            "loss:        {} (smooth {})",
            t.loss.map_or("-".into(), |x| format!("{x:.4}")),
            t.loss_smooth.map_or("-".into(), |x| format!("{x:.4}"))
        ));
        line(format!(
            "lr:          {}",
            t.lr.map_or("-".into(), |x| format!("{x:.3e}"))
        ));
        line(format!(
            "speed:       {}",
            t.steps_per_sec
                .map_or("-".into(), |x| format!("{x:.3} steps/s"))
        ));
        line(format!(
            "ETA:         {}",
            match (t.eta_hours, t.eta_seconds) {
                (Some(h), Some(s)) => format!("{h:.1} h ({s} s)"),
                _ => "-".into(),
            }
        ));
        let mut heartbeat = match t.heartbeat_age_s {
            Some(age) => format!("{age} s ago"),
            None => "none".into(),
        };
        heartbeat.push_str(if t.heartbeat_stale {
            " · STALE"
        } else {
            " · ok"
        });
        if let Some(err) = &t.heartbeat_error {
            let _ = write!(heartbeat, " · error: {err}");
        }
        line(format!("heartbeat:   {heartbeat}"));
        line(format!(
            "checkpoints: {} (latest {})",
            t.checkpoints,
            opt(&t.latest_checkpoint)
        ));
        if let Some(r) = &t.replay {
            line(format!("replay:      {}", r.line()));
        }
        if let Some(t) = &self.tracking {
            line(format!("tracking:    {}", t.line()));
        }
        if let Some(g) = &self.goodput {
            line(g.line());
            if let Some(s) = g.step_time.as_ref().filter(|s| s.slow) {
                line(format!(
                    "slower:      {:.3} s/step against {:.3} s/step in {}",
                    s.current_s, s.baseline_s, s.stage
                ));
            }
            if let Some(advice) = g.checkpoint.as_ref().and_then(|c| c.advice.as_ref()) {
                line(format!("advice:      {advice}"));
            }
        }
        let mut data = format!("shards {}", self.data.shard_count);
        for (key, value) in &self.data.extra {
            if let Some(value) = value {
                let _ = write!(data, " · {key} {value}");
            }
        }
        line(format!("data:        {data}"));
        for notice in &self.notices {
            line(format!("notice:      {notice}"));
        }
        let d = &self.disk;
        line(format!(
            "disk:        {} · {} GiB used · {} GiB free",
            opt(&d.device),
            opt(&d.used_gib),
            opt(&d.avail_gib)
        ));
        out
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), ToString::to_string)
}

/// The steps in pipeline order; steps that are not pipeline steps follow alphabetically.
fn ordered_steps(
    steps: &BTreeMap<String, StepState>,
) -> impl Iterator<Item = (&String, &StepState)> {
    let mut v: Vec<_> = steps.iter().collect();
    v.sort_by_key(|(name, _)| crate::config::PipelineStep::display_rank(name));
    v.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heartbeat::WorkerState;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 4, 5, 19, 16, 27).unwrap()
    }

    fn hb(state: WorkerState, timestamp: &str) -> Heartbeat {
        Heartbeat {
            step: 1000,
            total_steps: 50_000,
            stage: "pretrain".into(),
            epoch: Some(0.5),
            epochs: Some(1),
            loss: Some(1.125),
            loss_smooth: Some(0.899),
            lr: Some(9.99e-5),
            grad_norm: None,
            steps_per_sec: Some(0.19),
            eta_seconds: Some(289_477),
            timestamp: timestamp.into(),
            pid: 13584,
            state,
            latest_checkpoint: Some("pretrain-19-10-00-0005".into()),
            failure: None,
        }
    }

    fn training(hb: Option<Result<Heartbeat, String>>, stale: bool, alive: bool) -> TrainingStatus {
        TrainingStatus::from_heartbeat(hb, now(), stale, alive, 5, None)
    }

    #[test]
    fn fresh_heartbeat() {
        let t = training(
            Some(Ok(hb(WorkerState::Training, "2026-04-05T19:14:27Z"))),
            false,
            true,
        );
        assert_eq!(t.step, Some(1000));
        assert_eq!(t.pct, Some(2.0));
        assert_eq!(t.eta_hours, Some(80.41));
        assert_eq!(t.heartbeat_age_s, Some(120));
        assert!(!t.heartbeat_stale);
        assert!(t.running);
        assert_eq!(
            t.latest_checkpoint.as_deref(),
            Some("pretrain-19-10-00-0005")
        );
        assert_eq!(t.stage.as_deref(), Some("pretrain"));
    }

    #[test]
    fn pct_is_clamped_and_null_without_total() {
        let mut h = hb(WorkerState::Training, "2026-04-05T19:14:27Z");
        h.step = 60_000;
        assert_eq!(training(Some(Ok(h.clone())), false, true).pct, Some(100.0));
        h.total_steps = 0;
        let t = training(Some(Ok(h)), false, true);
        assert_eq!(t.pct, None);
        assert_eq!(t.total_steps, None);
    }

    #[test]
    fn stale_is_the_daemons_verdict_on_a_live_worker() {
        let old = "2026-04-05T19:00:00Z";
        assert!(training(Some(Ok(hb(WorkerState::Training, old))), true, true).heartbeat_stale);
        assert!(!training(Some(Ok(hb(WorkerState::Training, old))), false, true).heartbeat_stale);
        // No worker, nothing hung.
        assert!(!training(Some(Ok(hb(WorkerState::Training, old))), true, false).heartbeat_stale);
    }

    #[test]
    fn future_heartbeat_has_age_zero() {
        let t = training(
            Some(Ok(hb(WorkerState::Training, "2026-04-05T19:20:00Z"))),
            false,
            true,
        );
        assert_eq!(t.heartbeat_age_s, Some(0));
    }

    #[test]
    fn negative_and_non_finite_values_become_null() {
        let mut h = hb(WorkerState::Training, "2026-04-05T19:14:27Z");
        h.lr = Some(-1.0);
        h.loss = Some(f64::NAN);
        h.steps_per_sec = Some(f64::INFINITY);
        let t = training(Some(Ok(h)), false, true);
        assert_eq!((t.lr, t.loss, t.steps_per_sec), (None, None, None));
    }

    #[test]
    fn no_or_bad_heartbeat() {
        let t = training(None, false, true);
        assert!(t.running && !t.heartbeat_stale && t.step.is_none());
        let t = training(None, true, true);
        assert!(t.heartbeat_stale);
        let t = training(Some(Err("heartbeat.json is empty".into())), false, false);
        assert!(!t.running && !t.heartbeat_stale);
        assert_eq!(
            t.heartbeat_error.as_deref(),
            Some("heartbeat.json is empty")
        );
        let t = training(Some(Ok(hb(WorkerState::Training, "yesterday"))), true, true);
        assert_eq!(t.heartbeat_age_s, None);
        assert!(t.heartbeat_stale);
        assert!(t.heartbeat_error.unwrap().contains("yesterday"));
    }

    #[test]
    fn the_active_step_serializes_as_the_step_name() {
        // The status JSON and the alert feed carry a step as the name the worker takes.
        for step in PipelineStep::ALL {
            let mut st = Status::never_started(Utc::now());
            st.active_step = Some(step);
            let doc = serde_json::to_value(&st).unwrap();
            assert_eq!(doc["active_step"], step.as_str());
            assert_eq!(serde_json::from_value::<Status>(doc).unwrap(), st);
        }
    }

    #[test]
    fn data_from_counts() {
        let counts = BTreeMap::from([
            ("shard_count".to_string(), Some(43)),
            ("tokens".to_string(), Some(1234)),
            ("sft_samples".to_string(), None),
        ]);
        let d = DataStatus::from_counts(counts, 3);
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"shard_count": 43, "checkpoints": 3, "tokens": 1234, "sft_samples": null})
        );
        let back: DataStatus = serde_json::from_value(v).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn text_view() {
        let mut s = Status::never_started(now());
        let text = s.to_text();
        assert!(text.contains("pipeline:    idle"), "{text}");
        assert!(text.contains("heartbeat:   none · ok"), "{text}");
        s.steps.insert("train".into(), StepState::Running);
        s.steps.insert("downloads".into(), StepState::Done);
        s.training = training(
            Some(Ok(hb(WorkerState::Training, "2026-04-05T19:00:00Z"))),
            true,
            true,
        );
        s.disk = DiskStatus::from_bytes(Some("/dev/sda1".into()), 1307 << 30, 555 << 30);
        let text = s.to_text();
        assert!(
            text.contains("steps:       downloads done · train running"),
            "{text}"
        );
        assert!(text.contains("step:        1000 / 50000 (2.0%)"), "{text}");
        assert!(text.contains("STALE"), "{text}");
        assert!(
            text.contains("/dev/sda1 · 1307 GiB used · 555 GiB free"),
            "{text}"
        );
        assert!(text.lines().count() >= 12, "{text}");
        assert!(!text.contains("recovered:"), "{text}");
        s.pipeline.recovery = Some(Recovery {
            reason: RecoveryReason::Hung,
            message: "hung at step 40 for 5m 0s; restarted from pretrain-19-10-00-0005".into(),
            at: "2026-04-05T19:10:00.000Z".into(),
            checkpoint: Some("pretrain-19-10-00-0005".into()),
        });
        s.pipeline.failure = Some(Failure::new(
            crate::failure::FailureKind::Crash,
            "exit code 1",
        ));
        let text = s.to_text();
        assert!(
            text.contains("recovered:   hung at step 40 for 5m 0s; restarted from pretrain-19-10-00-0005 (at 2026-04-05T19:10:00.000Z)"),
            "{text}"
        );
        assert!(text.contains("failure:     crash: exit code 1"), "{text}");
    }
}
