//! The tracking task: one experiment-tracker run per lavender run lineage
//! (`lavender::tracking`). It follows the refresher's snapshots (at most one pass a
//! second, and every few seconds while a tracker does not answer) and gives each
//! tracker the daemon writes to (MLflow, TensorBoard) what it has not taken yet:
//! - the training metrics of the run's per-step record, each step once, unless the
//!   worker reports them itself (`metrics: worker`: one writer per metric);
//! - the supervision events: the decision log's lines (restart, hang kill, rollback,
//!   checkpoint set aside, disk wait, requeue…), a resume in a new run of the
//!   lineage, replication falling behind and catching up, the pipeline's end;
//! - the config as params once (a later change becomes a tag), and at the end the
//!   goodput figures.
//!
//! The run's own files are the queue: what a tracker has acknowledged is in
//! `state/tracking/<lineage>.<tracker>.json`, written after each batch it took, and
//! what it has not stays in the record and the decision log. A tracker that does
//! not answer costs the run nothing; the task says when it went and when it came
//! back, and sends what waited. What can be lost is only what left those files
//! meanwhile (a rotated decision log, a deleted run).
//!
//! The worker's side (`lavender::tracking::worker_env`) is [`launch_env`], called by
//! a launch before the worker exists.

pub mod mlflow;

use std::path::{Path, PathBuf};
use std::time::Duration;

use lavender::config::{Config, MetricsWriter};
use lavender::status::PipelineState;
use lavender::tracking::tensorboard::{self, EventFile};
use lavender::tracking::{Identity, MlflowRun, Point, Progress, TrackingStatus};
use tokio::sync::watch;

/// The longest a launch waits for the lineage's first MLflow run to be made (once
/// per lineage; a server that does not answer delays a relaunch by no more).
const LAUNCH_WAIT: Duration = Duration::from_secs(5);

/// The most metric points one pass reads from the record (the rest wait for the
/// next pass, a second later).
const MAX_POINTS_PER_PASS: usize = 2000;

/// The most bytes of the decision log read a pass (its newest).
const MAX_DECISIONS_READ: u64 = 4 << 20;

/// The variable that tells a worker resumed from `resume` the last step its run had
/// trained before (the steps up to it are a replay): a worker that reports to a
/// tracker itself leaves them out (`lavender_protocol.hf`), as the daemon does.
pub const REPLAY_THROUGH_VAR: &str = "LAVENDER_REPLAY_THROUGH_STEP";

/// The environment a worker of `run_dir`'s lineage is given (blocking: it may make
/// the lineage's MLflow run, waiting up to [`LAUNCH_WAIT`]). Nothing when no tracker
/// is configured.
pub fn launch_env(
    config: &Config,
    state_dir: &Path,
    run_dir: &Path,
    resume: Option<&Path>,
) -> Vec<(String, String)> {
    let tracking = &config.tracking;
    if !tracking.any() {
        return Vec::new();
    }
    let lineage = lavender::run::lineage_root(run_dir);
    let identity = match Identity::read_or_make(state_dir, &lineage) {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!("tracking: cannot keep the ids of lineage {lineage}: {e}");
            return Vec::new();
        }
    };
    let identity = match &tracking.mlflow {
        Some(m) if identity.mlflow.as_ref().is_none_or(|r| r.uri != m.uri) => {
            let made = tokio::runtime::Handle::try_current()
                .map_err(anyhow::Error::from)
                .and_then(|rt| {
                    rt.block_on(async {
                        tokio::time::timeout(LAUNCH_WAIT, make_mlflow_run(state_dir, m, &lineage))
                            .await
                    })
                    .map_err(|_| anyhow::anyhow!("no answer within {LAUNCH_WAIT:?}"))?
                });
            match made {
                Ok(id) => id,
                Err(e) => {
                    tracing::warn!(
                        "tracking: no MLflow run for lineage {lineage} yet ({e:#}); the worker starts without MLFLOW_RUN_ID, the daemon makes the run when the server answers"
                    );
                    identity
                }
            }
        }
        _ => identity,
    };
    let mut env = lavender::tracking::worker_env(tracking, &identity);
    if let Some(through) = replay_through(state_dir, run_dir, resume) {
        env.push((REPLAY_THROUGH_VAR.into(), through.to_string()));
    }
    env
}

/// The last step of the first pass a resume from `resume` trains again, when the
/// replay check kept it (`lavender::replay::keep`, just before).
fn replay_through(state_dir: &Path, run_dir: &Path, resume: Option<&Path>) -> Option<u64> {
    let checkpoint = resume?.file_name()?.to_string_lossy().into_owned();
    let run = run_dir.file_name()?.to_string_lossy().into_owned();
    let replay = lavender::replay::Replay::read(state_dir, &run)?;
    (replay.checkpoint == checkpoint && replay.verdict == lavender::replay::Verdict::Checking)
        .then(|| replay.expected.keys().next_back().copied())
        .flatten()
}

async fn make_mlflow_run(
    state_dir: &Path,
    m: &lavender::config::MlflowConfig,
    lineage: &str,
) -> anyhow::Result<Identity> {
    let client = mlflow::Mlflow::new(&m.uri)?;
    let experiment_id = client.experiment_id(&m.experiment).await?;
    let run_id = client
        .create_run(&experiment_id, lineage, &[("lavender.lineage", lineage)])
        .await?;
    let run = MlflowRun {
        uri: client.uri().to_string(),
        experiment_id,
        run_id,
    };
    let id = Identity::set_mlflow(state_dir, lineage, run)?;
    tracing::info!(
        "tracking: MLflow run {} for lineage {lineage}",
        id.mlflow.as_ref().map(MlflowRun::url).unwrap_or_default()
    );
    Ok(id)
}

/// Starts the task, told what the status says by `seen` (the daemon forwards the
/// refresher's snapshots).
pub fn spawn(state_dir: PathBuf, config: Config, seen: watch::Receiver<Option<Seen>>) {
    if !config.tracking.any() {
        return;
    }
    tokio::spawn(run(Tracker::new(state_dir, config), seen));
}

async fn run(mut t: Tracker, mut snapshots: watch::Receiver<Option<Seen>>) {
    loop {
        let seen = snapshots.borrow_and_update().clone();
        t.backlog = false;
        if let Some(seen) = seen {
            t.pass(&seen).await;
        }
        if t.backlog && t.down.iter().all(Option::is_none) {
            // More of the record waits: the next batch at once.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let retry = if t.down.iter().any(Option::is_some) {
            Duration::from_secs(5)
        } else {
            Duration::from_secs(30)
        };
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

/// What the status says that the trackers are told.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The pipeline's run.
    pub run_dir: PathBuf,
    pub state: PipelineState,
    /// The training step, and steps a second, last reported.
    pub step: Option<u64>,
    pub steps_per_sec: Option<f64>,
    /// Replication is behind (`replicate.max_lag_s`).
    pub replication_behind: bool,
}

/// One supervision event.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    step: u64,
    at: String,
    text: String,
}

/// What a tracker is told in one pass, and its progress once it took it.
#[derive(Debug, Default)]
struct Batch {
    points: Vec<Point>,
    events: Vec<Event>,
    params: Vec<(String, String)>,
    tags: Vec<(String, String)>,
    /// The run's status to set (`RUNNING`, `FINISHED`, `FAILED`, `KILLED`).
    status: Option<String>,
    next: Progress,
    /// When it was gathered (ms): every point's timestamp, the same when sent again.
    timestamp_ms: i64,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.points.is_empty()
            && self.events.is_empty()
            && self.params.is_empty()
            && self.tags.is_empty()
            && self.status.is_none()
    }
}

const TRACKERS: [&str; 2] = ["mlflow", "tensorboard"];

/// When a tracker stopped answering, and why.
struct Down {
    since: chrono::DateTime<chrono::Utc>,
    error: String,
}

struct Tracker {
    state_dir: PathBuf,
    config: Config,
    mlflow: Option<mlflow::Mlflow>,
    tensorboard: Option<(String, EventFile)>,
    /// Per tracker of [`TRACKERS`].
    down: [Option<Down>; 2],
    /// Per tracker, the outage to say on the run once it answers again.
    gap: [Option<String>; 2],
    /// MLflow's batch not acknowledged, for its lineage.
    pending: Option<(String, Batch)>,
    /// A pass left more of the record than one batch holds.
    backlog: bool,
}

impl Tracker {
    fn new(state_dir: PathBuf, config: Config) -> Tracker {
        let mlflow = config.tracking.mlflow.as_ref().and_then(|m| {
            mlflow::Mlflow::new(&m.uri)
                .inspect_err(|e| tracing::warn!("tracking: MLflow off: {e:#}"))
                .ok()
        });
        Tracker {
            state_dir,
            config,
            mlflow,
            tensorboard: None,
            down: [None, None],
            gap: [None, None],
            pending: None,
            backlog: false,
        }
    }

    async fn pass(&mut self, seen: &Seen) {
        let lineage = lavender::run::lineage_root(&seen.run_dir);
        let Ok(identity) = Identity::read_or_make(&self.state_dir, &lineage) else {
            return;
        };
        let mut status = TrackingStatus {
            lineage: lineage.clone(),
            wandb: self
                .config
                .tracking
                .wandb
                .as_ref()
                .map(|_| identity.wandb_run_id.clone()),
            ..TrackingStatus::default()
        };
        if let Some(m) = self.config.tracking.mlflow.clone() {
            let identity = match identity.mlflow.as_ref().filter(|r| r.uri == m.uri) {
                Some(_) => Ok(identity.clone()),
                None => make_mlflow_run(&self.state_dir, &m, &lineage).await,
            };
            let result = match &identity {
                Ok(id) => {
                    let run = id.mlflow.clone().expect("made above");
                    status.mlflow = Some(run.url());
                    // A batch the server did not answer for is sent again as it was
                    // (its timestamps too: MLflow keeps one of two identical points,
                    // so a batch it took before its answer was lost is not doubled).
                    let pending = self.pending.take().filter(|(l, _)| *l == lineage);
                    match pending
                        .map(|(_, b)| b)
                        .or_else(|| self.prepare(0, &lineage, seen, m.metrics))
                    {
                        Some(batch) => match self.send_mlflow(&run.run_id, &batch).await {
                            Ok(()) => self.commit(0, &lineage, batch, Ok(())),
                            Err(e) => {
                                self.pending = Some((lineage.clone(), batch));
                                Err(format!("{e:#}"))
                            }
                        },
                        None => Ok(()),
                    }
                }
                Err(e) => Err(format!("{e:#}")),
            };
            self.said(0, result);
        }
        if let Some(tb) = self.config.tracking.tensorboard.clone() {
            let folder = tb.dir.join(&lineage);
            status.tensorboard = Some(folder.clone());
            let result = match self.prepare(1, &lineage, seen, tb.metrics) {
                Some(batch) => {
                    let sent = self.send_tensorboard(&folder, &batch);
                    self.commit(1, &lineage, batch, sent)
                }
                None => Ok(()),
            };
            self.said(1, result);
        }
        status.unreachable = self
            .down
            .iter()
            .zip(TRACKERS)
            .filter_map(|(d, name)| {
                d.as_ref()
                    .map(|d| format!("{name} since {}: {}", d.since.to_rfc3339(), d.error))
            })
            .reduce(|a, b| format!("{a}; {b}"));
        let path = lavender::tracking::status_path(&self.state_dir);
        let unchanged = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<TrackingStatus>(&b).ok())
            .is_some_and(|old| old == status);
        if !unchanged && let Err(e) = lavender::atomic::write_json(&path, &status) {
            tracing::warn!("tracking: {e}");
        }
    }

    /// What tracker `i` has not taken; `None` when there is nothing to tell it
    /// and nothing of its progress to keep.
    fn prepare(
        &mut self,
        i: usize,
        lineage: &str,
        seen: &Seen,
        metrics: MetricsWriter,
    ) -> Option<Batch> {
        let progress = Progress::read(&self.state_dir, lineage, TRACKERS[i]);
        let mut batch = gather(
            &self.state_dir,
            &self.config,
            lineage,
            seen,
            &progress,
            metrics == MetricsWriter::Daemon,
        );
        if let Some(text) = self.gap[i].take() {
            batch.events.push(Event {
                step: seen.step.unwrap_or(0),
                at: now(),
                text,
            });
            batch.next.events += 1;
        }
        self.backlog |= batch.points.len() >= MAX_POINTS_PER_PASS;
        (!batch.is_empty() || batch.next != progress).then_some(batch)
    }

    /// Keeps tracker `i`'s progress once it took `batch` (`sent`).
    fn commit(
        &self,
        i: usize,
        lineage: &str,
        batch: Batch,
        sent: anyhow::Result<()>,
    ) -> Result<(), String> {
        sent.map_err(|e| format!("{e:#}"))?;
        batch
            .next
            .write(&self.state_dir, lineage, TRACKERS[i])
            .map_err(|e| e.to_string())
    }

    /// Says a tracker going and coming back, once each.
    fn said(&mut self, i: usize, result: Result<(), String>) {
        let name = TRACKERS[i];
        match (result, self.down[i].take()) {
            (Ok(()), Some(d)) => {
                let secs = (chrono::Utc::now() - d.since).num_seconds();
                tracing::info!(
                    "tracking: {name} answers again after {secs} s; what waited was sent"
                );
                self.gap[i] = Some(format!(
                    "tracker unreachable from {} for {secs} s ({}); what the run did meanwhile was sent when it answered",
                    d.since.to_rfc3339(),
                    d.error
                ));
            }
            (Ok(()), None) => {}
            (Err(error), None) => {
                tracing::warn!(
                    "tracking: {name} did not take the run's metrics and events ({error}); training goes on, and what waits stays in the run's files until it answers"
                );
                self.down[i] = Some(Down {
                    since: chrono::Utc::now(),
                    error,
                });
            }
            (Err(error), Some(d)) => {
                self.down[i] = Some(Down {
                    since: d.since,
                    error,
                })
            }
        }
    }

    async fn send_mlflow(&self, run_id: &str, batch: &Batch) -> anyhow::Result<()> {
        let client = self
            .mlflow
            .clone()
            .ok_or_else(|| anyhow::anyhow!("no MLflow client"))?;
        let ts = batch.timestamp_ms;
        let mut metrics: Vec<mlflow::Metric> = batch
            .points
            .iter()
            .map(|p| mlflow::Metric {
                key: &p.key,
                value: p.value,
                step: p.step,
                timestamp_ms: ts,
            })
            .collect();
        let mut tags = batch.tags.clone();
        let first = batch.next.events - batch.events.len() as u64;
        for (n, e) in batch.events.iter().enumerate() {
            metrics.push(mlflow::Metric {
                key: "lavender/event",
                value: 1.0,
                step: e.step,
                timestamp_ms: ts,
            });
            let text: String = format!("{} step {}: {}", e.at, e.step, e.text)
                .chars()
                .take(4000)
                .collect();
            tags.push((format!("lavender.event.{:05}", first + n as u64 + 1), text));
        }
        if let Some(e) = batch.events.last() {
            tags.push((
                "lavender.last_event".into(),
                e.text.chars().take(4000).collect(),
            ));
        }
        client
            .log_batch(run_id, &metrics, &batch.params, &tags)
            .await?;
        if let Some(s) = &batch.status {
            client.set_status(run_id, s).await?;
        }
        Ok(())
    }

    fn send_tensorboard(&mut self, folder: &Path, batch: &Batch) -> anyhow::Result<()> {
        let wall = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
        let lineage = folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if self.tensorboard.as_ref().is_none_or(|(l, _)| *l != lineage) {
            self.tensorboard = Some((lineage.clone(), EventFile::create(folder, wall)?));
        }
        let (_, file) = self.tensorboard.as_mut().expect("made above");
        let mut events: Vec<Vec<u8>> = batch
            .points
            .iter()
            .map(|p| tensorboard::scalar(wall, p.step, &p.key, p.value as f32))
            .collect();
        for e in &batch.events {
            events.push(tensorboard::scalar(wall, e.step, "lavender/event", 1.0));
            events.push(tensorboard::text(
                wall,
                e.step,
                "lavender/events",
                &format!("{}: {}", e.at, e.text),
            ));
        }
        if !batch.params.is_empty() || !batch.tags.is_empty() {
            let lines: Vec<String> = batch
                .params
                .iter()
                .chain(&batch.tags)
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            events.push(tensorboard::text(
                wall,
                0,
                "lavender/config",
                &lines.join("\n\n"),
            ));
        }
        file.append(&events)?;
        Ok(())
    }
}

fn now() -> String {
    lavender::time::now_utc().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// What a tracker at `progress` has not taken of the lineage's run at `seen`.
fn gather(
    state_dir: &Path,
    config: &Config,
    lineage: &str,
    seen: &Seen,
    progress: &Progress,
    metrics: bool,
) -> Batch {
    let mut b = Batch {
        next: progress.clone(),
        timestamp_ms: chrono::Utc::now().timestamp_millis(),
        ..Batch::default()
    };
    let run = seen
        .run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let step_now = seen.step.unwrap_or(0);
    let event = |b: &mut Batch, step: u64, at: String, text: String| {
        b.events.push(Event { step, at, text });
        b.next.events += 1;
    };
    if b.next.since.is_none() {
        // The lineage's start (its first run's name): decisions before it are
        // another lineage's.
        let started = lavender::run::parse_run_name(lineage)
            .map(|t| t.and_utc())
            .unwrap_or_else(|_| chrono::Utc::now());
        b.next.since = Some(started.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    }
    // A resume in a new run of the lineage.
    if !b.next.record.run.is_empty() && b.next.record.run != run {
        event(
            &mut b,
            step_now,
            now(),
            format!("resumed in run {run} (lineage {lineage})"),
        );
    }
    if b.next.record.run != run {
        b.next.record = lavender::tracking::RecordPosition {
            run: run.clone(),
            ..Default::default()
        };
    }
    // Rollbacks: the retrained steps are new values.
    let ranges = lavender::skips::read(&seen.run_dir)
        .map(|s| s.ranges)
        .unwrap_or_default();
    let taken = b.next.rollbacks.get(&run).copied().unwrap_or(0);
    for r in ranges.iter().skip(taken) {
        b.next.rolled_back_to(r.from_step);
    }
    b.next
        .rollbacks
        .insert(run.clone(), ranges.len().max(taken));
    // The decision log.
    let time = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    let since = b.next.since.as_deref().and_then(time);
    for (at, id, step, text) in decisions(state_dir) {
        let Some(when) = time(&at) else {
            continue;
        };
        let after = b.next.last_event.as_ref().is_none_or(|(a, i)| {
            time(a).is_none_or(|last| (when, id.as_str()) > (last, i.as_str()))
        });
        if since.is_none_or(|s| when >= s) && after {
            b.next.last_event = Some((at.clone(), id));
            event(&mut b, step.unwrap_or(step_now), at, text);
        }
    }
    if seen.replication_behind != b.next.replication_behind {
        b.next.replication_behind = seen.replication_behind;
        let text = if seen.replication_behind {
            "replication behind: the newest checkpoints are not yet safely off the machine"
        } else {
            "replication caught up"
        };
        event(&mut b, step_now, now(), text.into());
    }
    if metrics {
        read_record(seen, &mut b);
        if let (Some(step), Some(rate)) = (seen.step, seen.steps_per_sec) {
            // lavender-worker trains `training.*`'s tokens a step; another worker's
            // are its own.
            let t = &config.training;
            let tokens = config.runs_lavender_worker().then(|| {
                rate * (u64::from(t.batch_size) * u64::from(t.seq_len) * u64::from(t.grad_accum))
                    as f64
            });
            let rates = [
                ("lavender/steps_per_s", Some(rate)),
                ("lavender/tokens_per_s", tokens),
            ];
            for (key, value) in rates {
                let Some(value) = value.filter(|v| v.is_finite()) else {
                    continue;
                };
                let p = Point {
                    key: key.into(),
                    step,
                    value,
                };
                if b.next.fresh(&p) {
                    b.next.logged(&p);
                    b.points.push(p);
                }
            }
        }
    }
    // The config: params once, a change later as a tag.
    let params = flat_config(config);
    if b.next.params.is_empty() {
        b.params = params.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        b.next.params = params;
    } else {
        for (k, v) in params {
            let old = b.next.params.get(&k).cloned();
            if old.as_ref() != Some(&v) {
                b.next.config_changes += 1;
                b.tags.push((
                    format!("lavender.config_change.{:04}", b.next.config_changes),
                    format!("{k}: {} -> {v}", old.as_deref().unwrap_or("(unset)")),
                ));
                b.next.params.insert(k, v);
            }
        }
    }
    // The end, or a run going again after one: once the record is all sent.
    if b.points.len() >= MAX_POINTS_PER_PASS {
        return b;
    }
    let status = match seen.state {
        PipelineState::Finished => "FINISHED",
        PipelineState::Failed => "FAILED",
        PipelineState::Stopped => "KILLED",
        PipelineState::Idle => return b,
        _ => "RUNNING",
    };
    if b.next.ended.as_deref() != Some(status) {
        let first = b.next.ended.is_none();
        b.next.ended = Some(status.into());
        if status == "RUNNING" {
            if !first {
                b.status = Some(status.into());
            }
            return b;
        }
        b.status = Some(status.into());
        let said = match seen.state {
            PipelineState::Finished => "finished".to_string(),
            PipelineState::Failed => "failed".to_string(),
            _ => "stopped (a resume continues this tracker run)".to_string(),
        };
        if let Some(g) = lavender::goodput::read_status(state_dir, &run) {
            for bucket in lavender::goodput::Bucket::ALL {
                b.points.push(Point {
                    key: format!("lavender/goodput/{}_s", bucket.as_str()),
                    step: step_now,
                    value: g.seconds.get(bucket),
                });
            }
            if let Some(ratio) = g.goodput {
                b.points.push(Point {
                    key: "lavender/goodput".into(),
                    step: step_now,
                    value: ratio,
                });
            }
        }
        event(&mut b, step_now, now(), said);
    }
    b
}

/// The run's per-step record past the tracker's position: each metric's steps not
/// logged yet.
fn read_record(seen: &Seen, b: &mut Batch) {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::MetadataExt;
    let path = seen.run_dir.join(lavender::log_history::SIDECAR);
    let Ok(mut file) = std::fs::File::open(&path) else {
        return;
    };
    let Ok(md) = file.metadata() else {
        return;
    };
    let pos = &mut b.next.record;
    // The replay check's cut-back writes the record anew: read it from the start
    // (the marks keep the steps already logged from repeating).
    if md.ino() != pos.inode || md.len() < pos.offset {
        pos.inode = md.ino();
        pos.offset = 0;
    }
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(pos.offset)).is_err()
        || file
            .take(lavender::replay::MAX_READ)
            .read_to_end(&mut bytes)
            .is_err()
    {
        return;
    }
    // Whole lines only (one still being written waits), and at most
    // MAX_POINTS_PER_PASS points: a long backlog goes in batches a slow server takes
    // within its timeout.
    let mut used = 0;
    for line in bytes.split_inclusive(|&c| c == b'\n') {
        if !line.ends_with(b"\n") || b.points.len() >= MAX_POINTS_PER_PASS {
            break;
        }
        used += line.len();
        for p in lavender::tracking::points(&String::from_utf8_lossy(line)) {
            if b.next.fresh(&p) {
                b.next.logged(&p);
                b.points.push(p);
            }
        }
    }
    b.next.record.offset += used as u64;
}

/// The decision log's decisions, oldest first: time, id, training step, words.
fn decisions(state_dir: &Path) -> Vec<(String, String, Option<u64>, String)> {
    use std::io::{Read, Seek, SeekFrom};
    let path = state_dir.join("decisions.jsonl");
    let Ok(mut file) = std::fs::File::open(&path) else {
        return Vec::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(MAX_DECISIONS_READ);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str::<crate::decisions::record::Line>(l).ok())
        .filter_map(|l| match l {
            crate::decisions::record::Line::Decision(d) => Some(d),
            crate::decisions::record::Line::Outcome(_) => None,
        })
        .map(|d| {
            let text = format!("{}: {}", d.kind.as_str(), d.did);
            (d.at, d.id, d.saw.last_step, text)
        })
        .collect()
}

/// The config as MLflow params: each leaf as `a.b.c` = its YAML-ish value (lists as
/// JSON), at most 500 characters (longer ones are left out).
fn flat_config(config: &Config) -> std::collections::BTreeMap<String, String> {
    fn walk(
        prefix: &str,
        v: &serde_json::Value,
        out: &mut std::collections::BTreeMap<String, String>,
    ) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            serde_json::Value::String(s) => {
                out.insert(prefix.to_string(), s.clone());
            }
            other => {
                out.insert(prefix.to_string(), other.to_string());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    if let Ok(v) = serde_json::to_value(config) {
        walk("", &v, &mut out);
    }
    out.retain(|k, v| k.len() <= 250 && v.chars().count() <= 500);
    out
}

#[cfg(test)]
mod tests;
