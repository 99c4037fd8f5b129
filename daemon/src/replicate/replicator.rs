//! The daemon's replication task, the last duty of a checkpoint's life: handed a run
//! by the checkpoints room once its new checkpoints were read back and retention ran
//! (`checkpoints/lifecycle.rs`), it uploads the run's newest complete checkpoints not
//! yet remote, newest first, one at a time, on its own task (the pipeline actor, the
//! status and a stop never wait for it). Only a checkpoint with a good verdict goes
//! up in a run the daemon reads back: one not read back yet waits for its pass, a
//! damaged one is named in the status and never sent. A checkpoint whose upload was
//! cut short (no remote manifest) is uploaded again at the next pass, after a daemon
//! restart too: the room looks at a run from its first event on.
//!
//! Failures back off (2 s doubling to 5 min) and are logged once per incident; a
//! refused credential is not retried on a timer at all, only at the next save (one
//! clear error, no retry storm).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lavender::checkpoint::list_run_checkpoints;
use tokio::sync::mpsc;

use crate::alert::AlertSender;

use super::alarm::{self, Alarm};
use super::manifest::RemoteManifest;
use super::remote::{Remote, RemoteError, dir_name};
pub use super::state::{NOT_REPLICATED_KEPT, NotReplicated, RemoteRef, ReplicationStatus};
use super::throttle::Throttle;
use super::upload;

/// The follower's side of the task, and its status.
#[derive(Clone)]
pub struct Replication {
    wake: mpsc::UnboundedSender<PathBuf>,
    status: Arc<Mutex<ReplicationStatus>>,
}

impl Replication {
    /// The task for `config`'s `replicate:` section, when it names a target. A target
    /// that cannot be opened (no credentials) is logged once and shown in the status.
    /// Its alerts (falling behind, caught up again) go to `alerts`.
    pub fn from_config(
        config: &lavender::config::Config,
        data_root: &Path,
        alerts: AlertSender,
    ) -> Option<Replication> {
        let r = &config.replicate;
        let env = |k: &str| std::env::var(k).ok();
        match Remote::open(r, &env, data_root) {
            Ok(Some(remote)) => {
                tracing::info!("replicating checkpoints to {}", remote.target());
                let observe = config.supervisor.mode == lavender::config::SupervisorMode::Observe;
                let replication = Replication::start(remote, r.max_mbps, r.keep, observe);
                if let Ok(mut s) = replication.status.lock() {
                    s.max_lag_s = r.max_lag_s;
                }
                tokio::spawn(replication.clone().watch(alerts));
                Some(replication)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::error!("REPLICATE off: {e}");
                let (wake, rx) = mpsc::unbounded_channel();
                let status = ReplicationStatus {
                    target: r.target().map(|t| t.to_string()).unwrap_or_default(),
                    consecutive_failures: 1,
                    last_error: Some(e.to_string()),
                    unavailable: true,
                    ..ReplicationStatus::default()
                };
                let replication = Replication {
                    wake,
                    status: Arc::new(Mutex::new(status)),
                };
                // No task reads the saves; the receiver lives as long as the watcher,
                // which pushes `replication_unavailable` once.
                let watcher = replication.clone();
                tokio::spawn(async move {
                    let _rx = rx;
                    watcher.watch(alerts).await;
                });
                Some(replication)
            }
        }
    }

    /// Starts the task for `remote` (needs a tokio runtime).
    /// Under `observe`, remote retention and a rollback's remote deletions are said
    /// as what would have been done, and nothing remote is deleted.
    pub fn start(remote: Remote, max_mbps: Option<f64>, keep: u32, observe: bool) -> Replication {
        let status = Arc::new(Mutex::new(ReplicationStatus {
            target: remote.target().to_string(),
            ..ReplicationStatus::default()
        }));
        let (wake, rx) = mpsc::unbounded_channel();
        let task = Task {
            remote,
            throttle: Throttle::new(max_mbps),
            keep: keep as usize,
            status: status.clone(),
            known: BTreeMap::new(),
            gone: BTreeSet::new(),
            changed: BTreeMap::new(),
            observe,
            would_have: BTreeSet::new(),
            run_file_hashes: Default::default(),
        };
        tokio::spawn(task.run(rx));
        Replication { wake, status }
    }

    /// A pass over `run_dir` now: the room read back its new checkpoints (after a
    /// save, a rollback's resume, or the first look at a run).
    pub fn wake(&self, run_dir: &Path) {
        let _ = self.wake.send(run_dir.to_path_buf());
    }

    /// Raises the replication alert from the status, read every [`alarm::TICK`],
    /// until the task is gone.
    async fn watch(self, alerts: AlertSender) {
        let mut alarm = Alarm::default();
        let mut tick = tokio::time::interval(alarm::TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.wake.is_closed() {
            tick.tick().await;
            if let Some(alert) = alarm.step(&self.status(), Instant::now())
                && alerts.send(alert).is_err()
            {
                return;
            }
        }
    }

    pub fn status(&self) -> ReplicationStatus {
        let mut s = self.status.lock().map(|s| s.clone()).unwrap_or_default();
        // The waiting grows while nothing happens: taken now.
        if s.lag_steps.is_some() {
            let lag = s
                .waiting_since
                .map_or(0.0, |t| (unix_s(SystemTime::now()) - t).max(0.0));
            s.lag_s = Some(lag);
            s.behind = s.max_lag_s.is_some_and(|max| lag > max as f64);
        }
        s
    }
}

fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

struct Task {
    remote: Remote,
    throttle: Throttle,
    /// `replicate.keep`.
    keep: usize,
    status: Arc<Mutex<ReplicationStatus>>,
    /// Each run's committed remote checkpoints, listed at the first pass over it.
    known: BTreeMap<String, BTreeMap<String, RemoteManifest>>,
    /// Local checkpoints that went away while uploaded (retention), or are damaged:
    /// not tried again.
    gone: BTreeSet<PathBuf>,
    /// Uploads of a checkpoint cut short because it changed meanwhile.
    changed: BTreeMap<PathBuf, u32>,
    /// `supervisor.mode: observe`: nothing remote is deleted.
    observe: bool,
    /// The run-level files' hashes, taken once while each stays as it was.
    run_file_hashes: upload::RunFileHashes,
    /// In observe mode, the remote checkpoints already said as would-have-deleted.
    would_have: BTreeSet<(String, String)>,
}

/// Uploads of one checkpoint that may find it changed before it is skipped.
const CHANGED_TRIES: u32 = 3;

/// Backoff after `failures` consecutive failures: 2 s doubling, at most a minute
/// (a server back is used within a minute; a server down costs one attempt a minute).
fn backoff(failures: u32) -> Duration {
    Duration::from_secs((2u64 << failures.saturating_sub(1).min(5)).min(60))
}

/// The newest of `local` (a run's complete checkpoints, oldest first) that should be
/// remote and is not: not `known` remotely, not `gone`, and one remote retention
/// would keep beside what is there (`replicate.keep` over `known` and it). One it
/// would drop at once is never sent: whatever the local and remote keep values, each
/// checkpoint goes up at most once, and none is sent only to be deleted.
/// Whether a local checkpoint may go up.
#[derive(Debug, Clone, PartialEq)]
enum Ready {
    Yes,
    /// Not read back yet in a run the daemon reads back: its pass hands it over.
    NotYet,
    /// Read back and found damaged: never sent; why.
    Damaged(String),
}

/// What the verdicts of `run_dir` say of each of `local`'s checkpoints, as a listing
/// shows them (a verdict of files changed since is pending). A run nobody reads back
/// (no verdicts, not watched) uploads what is complete, as before.
fn checks(run_dir: &Path, local: &[lavender::checkpoint::Checkpoint]) -> Vec<Ready> {
    use lavender::checkpoint::verdicts::{self, Check};
    let watched = verdicts::watched(run_dir);
    local
        .iter()
        .map(|c| match verdicts::shown(c) {
            Check::Pending if watched => Ready::NotYet,
            check @ Check::Done(lavender::checkpoint::contents::Verdict::Damaged { .. }) => {
                Ready::Damaged(check.describe())
            }
            _ => Ready::Yes,
        })
        .collect()
}

fn next_upload<'a>(
    run: &str,
    local: &'a [lavender::checkpoint::Checkpoint],
    known: &BTreeMap<String, RemoteManifest>,
    gone: &BTreeSet<PathBuf>,
    keep: usize,
) -> Option<&'a lavender::checkpoint::Checkpoint> {
    local.iter().rev().find(|c| {
        if known.contains_key(&c.name) || gone.contains(&c.path) {
            return false;
        }
        let candidate = RemoteManifest::describe(run, c);
        let mut all: Vec<&RemoteManifest> = known.values().collect();
        all.push(&candidate);
        !super::retention::drop_list(&all, keep).contains(&c.name)
    })
}

impl Task {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<PathBuf>) {
        let mut run_dir: Option<PathBuf> = None;
        let mut failures = 0u32;
        let mut denied = false;
        loop {
            let woken = if failures > 0 && !denied {
                // Tried again when the backoff is over, however many saves come
                // meanwhile: they only name the run (a pass uploads all that is missing).
                let due = tokio::time::Instant::now() + backoff(failures);
                loop {
                    match tokio::time::timeout_at(due, rx.recv()).await {
                        Ok(None) => return,
                        Ok(Some(dir)) => run_dir = Some(dir),
                        Err(_) => break None, // the retry is due
                    }
                }
            } else {
                match rx.recv().await {
                    None => return,
                    Some(dir) => Some(dir),
                }
            };
            if let Some(dir) = woken {
                run_dir = Some(dir);
            }
            while let Ok(dir) = rx.try_recv() {
                run_dir = Some(dir);
            }
            let Some(dir) = run_dir.clone() else { continue };
            match self.pass(&dir).await {
                Ok(()) => {
                    if failures > 0 {
                        tracing::info!(
                            "replicate: {} reachable again after {failures} failed attempt(s)",
                            self.remote.target()
                        );
                    }
                    failures = 0;
                    denied = false;
                    self.set(|s| {
                        s.consecutive_failures = 0;
                        s.last_error = None;
                        s.unavailable = false;
                    });
                }
                Err(e) => {
                    failures += 1;
                    denied = !e.is_transient();
                    if failures == 1 {
                        tracing::error!("REPLICATE failed: {e}");
                    } else {
                        tracing::debug!("replicate: attempt {failures} failed: {e}");
                    }
                    let message = e.to_string();
                    let unavailable =
                        matches!(e, RemoteError::Denied { .. } | RemoteError::Config { .. });
                    self.set(|s| {
                        s.consecutive_failures = failures;
                        s.last_error = Some(message);
                        s.in_flight = None;
                        s.unavailable = unavailable;
                    });
                }
            }
        }
    }

    /// `name` will not be replicated, for `why`: said in the status.
    fn not_replicated(&self, name: &str, why: String) {
        self.set(|s| {
            s.in_flight = None;
            s.not_replicated.push(NotReplicated {
                checkpoint: name.to_string(),
                why,
            });
            let over = s.not_replicated.len().saturating_sub(NOT_REPLICATED_KEPT);
            s.not_replicated.drain(..over);
        });
    }

    fn set(&self, f: impl FnOnce(&mut ReplicationStatus)) {
        if let Ok(mut s) = self.status.lock() {
            f(&mut s);
        }
    }

    /// Uploads what `run_dir` has that the remote has not, newest first.
    async fn pass(&mut self, run_dir: &Path) -> Result<(), RemoteError> {
        let run = dir_name(run_dir);
        if !self.known.contains_key(&run) {
            let listed = self.remote.manifests(Some(&run)).await?;
            self.known.insert(
                run.clone(),
                listed
                    .into_iter()
                    .map(|m| (m.checkpoint.clone(), m))
                    .collect(),
            );
        }
        self.forget_diverged(&run, run_dir).await?;
        loop {
            let dir = run_dir.to_path_buf();
            let (local, checks) = tokio::task::spawn_blocking(move || {
                list_run_checkpoints(&dir).map(|local| {
                    let checks = checks(&dir, &local);
                    (local, checks)
                })
            })
            .await
            .map_err(|e| RemoteError::Local(e.to_string()))?
            .map_err(|e| RemoteError::Local(e.to_string()))?;
            self.measure(&run, &local);
            let mut ready = Vec::with_capacity(local.len());
            for (c, check) in local.iter().zip(checks) {
                match check {
                    Ready::Yes => ready.push(c.clone()),
                    Ready::NotYet => {}
                    Ready::Damaged(why) if !self.gone.contains(&c.path) => {
                        tracing::error!("REPLICATE skipped {run}/{}: {why}", c.name);
                        self.not_replicated(&c.name, why);
                        self.gone.insert(c.path.clone());
                    }
                    Ready::Damaged(_) => {}
                }
            }
            let Some(next) = next_upload(&run, &ready, &self.known[&run], &self.gone, self.keep)
            else {
                return self.retain(&run).await;
            };
            let (name, path) = (next.name.clone(), next.path.clone());
            self.set(|s| s.in_flight = Some(name.clone()));
            let started = Instant::now();
            match upload::upload(
                &self.remote,
                &run,
                &path,
                &self.throttle,
                &mut self.run_file_hashes,
            )
            .await
            {
                Ok(up) => {
                    let secs = started.elapsed().as_secs_f64();
                    let bytes = up.manifest.bytes();
                    tracing::info!(
                        "REPLICATED {run}/{name} to {} ({} files, {:.1} MB: sent in {:.2} s, read back in {:.2} s{})",
                        self.remote.target(),
                        up.manifest.files.len(),
                        bytes as f64 / 1e6,
                        up.sent_s,
                        up.read_back_s,
                        if up.built_manifest {
                            "; manifest built from its files"
                        } else {
                            ""
                        }
                    );
                    self.set(|s| {
                        s.in_flight = None;
                        s.last_mb_per_s = Some(bytes as f64 / 1e6 / secs.max(1e-6));
                    });
                    if let Some(k) = self.known.get_mut(&run) {
                        k.insert(name, up.manifest);
                    }
                }
                Err(RemoteError::Damaged { path: file, detail }) => {
                    // Not copied as if whole, and not tried again: the older
                    // checkpoints go up meanwhile.
                    let why = format!("{}: {detail}", file.display());
                    tracing::error!("REPLICATE skipped {run}/{name}: {why}");
                    self.not_replicated(&name, why);
                    self.gone.insert(path);
                }
                Err(RemoteError::Vanished(p)) => {
                    // Still complete: a file of it went meanwhile (the older
                    // checkpoints' optimizer state under `save_optimizer_state: last`)
                    // and its manifest no longer lists it; sent again as it is now.
                    let changed = lavender::checkpoint::is_complete(&p);
                    let tries = self.changed.entry(p.clone()).or_default();
                    *tries += 1;
                    if changed && *tries < CHANGED_TRIES {
                        tracing::info!(
                            "replicate: {run}/{name} changed while it was uploaded; sending it again"
                        );
                        self.set(|s| s.in_flight = None);
                        continue;
                    }
                    let why = if changed {
                        format!(
                            "a file it lists went missing during each of {CHANGED_TRIES} uploads"
                        )
                    } else {
                        "it was deleted before its upload finished (retention)".to_string()
                    };
                    tracing::warn!("REPLICATE skipped {run}/{name}: {why}");
                    self.not_replicated(&name, why);
                    self.gone.insert(p);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes the remote copies of the checkpoints a rollback set aside in `run_dir`
    /// (`.diverged-<name>`): a restore must never bring the diverged state back.
    async fn forget_diverged(&mut self, run: &str, run_dir: &Path) -> Result<(), RemoteError> {
        let dir = run_dir.to_path_buf();
        let diverged: Vec<String> = tokio::task::spawn_blocking(move || {
            std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_prefix(lavender::skips::SET_ASIDE_PREFIX)
                        .map(str::to_string)
                })
                .collect()
        })
        .await
        .map_err(|e| RemoteError::Local(e.to_string()))?;
        for name in diverged {
            if !self.known.get(run).is_some_and(|k| k.contains_key(&name)) {
                continue;
            }
            if self.observe {
                self.would_have_deleted(run, &name, "a rollback set it aside");
                continue;
            }
            self.remote.delete(run, &name).await?;
            if let Some(k) = self.known.get_mut(run) {
                k.remove(&name);
            }
            tracing::warn!(
                "REPLICATE deleted {run}/{name} from {}: a rollback set it aside (saved after the divergence began)",
                self.remote.target()
            );
        }
        Ok(())
    }

    /// Observe mode: the remote copy `run/ckpt` would have been deleted for `why`;
    /// said once.
    fn would_have_deleted(&mut self, run: &str, ckpt: &str, why: &str) {
        if self.would_have.insert((run.to_string(), ckpt.to_string())) {
            tracing::info!(
                "observe mode (supervisor.mode: observe): would have deleted {run}/{ckpt} from {} ({why}); nothing deleted",
                self.remote.target()
            );
        }
    }

    /// Deletes the remote checkpoints of `run` that `replicate.keep` drops.
    async fn retain(&mut self, run: &str) -> Result<(), RemoteError> {
        let Some(known) = self.known.get(run) else {
            return Ok(());
        };
        let all: Vec<&RemoteManifest> = known.values().collect();
        let dropped = super::retention::drop_list(&all, self.keep);
        if self.observe {
            let why = format!("replicate.keep {}", self.keep);
            for ckpt in &dropped {
                self.would_have_deleted(run, ckpt, &why);
            }
            return Ok(());
        }
        for ckpt in &dropped {
            self.remote.delete(run, ckpt).await?;
            if let Some(k) = self.known.get_mut(run) {
                k.remove(ckpt);
            }
        }
        self.publish_remote(run);
        if !dropped.is_empty() {
            let kept: Vec<&RemoteManifest> = self
                .known
                .get(run)
                .into_iter()
                .flat_map(|k| k.values())
                .collect();
            let files = self
                .remote
                .delete_unreferenced_run_files(run, &kept)
                .await?;
            if files > 0 {
                tracing::info!(
                    "replicate: {files} run file(s) of {run} no remote checkpoint needs any more deleted"
                );
            }
            tracing::info!(
                "REPLICATE dropped {} old remote ckpt(s) of {run} (replicate.keep {}): {}",
                dropped.len(),
                self.keep,
                dropped.join(", ")
            );
        }
        Ok(())
    }

    /// The status's newest remote checkpoint and lag, against `local` (the run's
    /// complete checkpoints, oldest first).
    /// The checkpoints of `run` committed remotely, into the status.
    fn publish_remote(&self, run: &str) {
        let names = self
            .known
            .get(run)
            .map(|k| k.keys().cloned().collect())
            .unwrap_or_default();
        self.set(|s| s.remote_checkpoints = Some((run.to_string(), names)));
    }

    fn measure(&self, run: &str, local: &[lavender::checkpoint::Checkpoint]) {
        let known = &self.known[run];
        let newest_remote = known
            .values()
            .max_by_key(|m| (m.completed_unix_ms, m.step))
            .cloned();
        let remote_ms = newest_remote.as_ref().map_or(0, |m| m.completed_unix_ms);
        let waiting = local
            .iter()
            .filter(|c| !known.contains_key(&c.name))
            .filter(|c| (unix_s(c.mtime) * 1000.0) as u64 > remote_ms)
            .map(|c| unix_s(c.mtime))
            .fold(None, |min: Option<f64>, t| {
                Some(min.map_or(t, |m| m.min(t)))
            });
        let newest_local = local.last().map(|c| c.state.step);
        self.publish_remote(run);
        self.set(|s| {
            s.lag_steps = newest_local
                .map(|l| l.saturating_sub(newest_remote.as_ref().map_or(0, |m| m.step)));
            s.waiting_since = waiting;
            s.newest_remote = newest_remote.map(|m| RemoteRef {
                run: m.run,
                checkpoint: m.checkpoint,
                step: m.step,
                uploaded_at: m.uploaded_at,
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::checkpoint::Checkpoint;
    use lavender::trainer_state::TrainerState;

    /// Saves every 10 steps with `local_keep` kept locally (oldest deleted first) and
    /// `remote_keep` remotely; each save followed by a pass: the uploads it makes.
    fn uploads_per_save(local_keep: usize, remote_keep: usize, saves: u64) -> Vec<usize> {
        let run = "run-2026-01-01_00-00-00";
        let mut local: Vec<Checkpoint> = Vec::new();
        let mut known: BTreeMap<String, RemoteManifest> = BTreeMap::new();
        let mut per_save = Vec::new();
        for i in 1..=saves {
            let name = format!("pretrain-00-00-00-{i:04}");
            local.push(Checkpoint {
                path: PathBuf::from(&name),
                parsed: name.parse().ok(),
                name,
                mtime: UNIX_EPOCH + Duration::from_secs(i),
                state: TrainerState::new("pretrain", i * 10),
            });
            if local.len() > local_keep {
                local.remove(0);
            }
            let mut sent = 0;
            while let Some(c) = next_upload(run, &local, &known, &BTreeSet::new(), remote_keep) {
                known.insert(c.name.clone(), RemoteManifest::describe(run, c));
                sent += 1;
                assert!(sent <= local.len(), "a pass that never ends");
            }
            let all: Vec<&RemoteManifest> = known.values().collect();
            for dropped in super::super::retention::drop_list(&all, remote_keep) {
                known.remove(&dropped);
            }
            per_save.push(sent);
        }
        per_save
    }

    /// A complete checkpoint of `run` named `name` at `step`, with a manifest.
    fn saved(run: &Path, name: &str, step: u64) -> PathBuf {
        use lavender::checkpoint::contents::{self, HashAlgorithm};
        let dir = run.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("model.safetensors"), vec![step as u8; 1000]).unwrap();
        let m = contents::build_from_disk(&dir, HashAlgorithm::Blake3).unwrap();
        contents::write(&dir, &m).unwrap();
        lavender::trainer_state::write(&dir, &TrainerState::new("pretrain", step)).unwrap();
        std::fs::File::options()
            .write(true)
            .open(dir.join("trainer_state.json"))
            .and_then(|f| f.set_modified(UNIX_EPOCH + Duration::from_secs(1_000 + step)))
            .unwrap();
        dir
    }

    /// One checkpoint that cannot be read (its manifest corrupt), one whose manifest
    /// lists a file that is not there: each is named in the status as not replicated,
    /// and the others still go up.
    #[tokio::test]
    async fn a_checkpoint_that_cannot_be_sent_is_named_and_the_others_go_up() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run-2026-01-01_00-00-00");
        for (i, step) in [10, 20, 30, 40].iter().enumerate() {
            saved(&run, &format!("pretrain-00-00-0{i}-000{i}"), *step);
        }
        std::fs::write(
            run.join("pretrain-00-00-01-0001/manifest.json"),
            b"{\"format\": 3",
        )
        .unwrap();
        std::fs::remove_file(run.join("pretrain-00-00-02-0002/model.safetensors")).unwrap();
        let remote = file_remote(dir.path(), "");
        let mut task = task(&remote);
        task.pass(&run).await.unwrap();
        assert_eq!(
            remote_names(&remote).await,
            ["pretrain-00-00-00-0000", "pretrain-00-00-03-0003"]
        );
        let status = task.status.lock().unwrap().clone();
        let named: Vec<(&str, &str)> = status
            .not_replicated
            .iter()
            .map(|n| (n.checkpoint.as_str(), n.why.as_str()))
            .collect();
        assert!(
            matches!(named[..], [("pretrain-00-00-02-0002", a), ("pretrain-00-00-01-0001", b)]
                if a.contains("went missing during each of 3 uploads") && b.contains("manifest.json: not a checkpoint content manifest")),
            "{named:?}"
        );
    }

    /// What a resume reads beside the checkpoint (the tokenizer, the DPO reference,
    /// the skipped data, the lineage, the config) goes up with it, once by content,
    /// and comes back with it into a run folder that lost everything.
    #[tokio::test]
    async fn the_run_files_go_up_once_and_come_back_with_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("checkpoints/run-2026-01-01_00-00-00");
        saved(&run, "pretrain-00-00-00-0000", 10);
        let files: Vec<(&str, Vec<u8>)> = lavender::run::RUN_FILES
            .iter()
            .map(|n| (*n, format!("the run's {n}").into_bytes()))
            .collect();
        for (name, bytes) in &files {
            std::fs::write(run.join(name), bytes).unwrap();
        }
        let remote = file_remote(dir.path(), "");
        let mut task = task(&remote);
        task.pass(&run).await.unwrap();
        saved(&run, "dpo-00-00-01-0001", 20);
        task.pass(&run).await.unwrap();
        let stored = |sub: &str| {
            std::fs::read_dir(dir.path().join("remote/run-2026-01-01_00-00-00").join(sub))
                .map(|d| d.count())
                .unwrap_or(0)
        };
        assert_eq!(
            stored("_run"),
            lavender::run::RUN_FILES.len(),
            "each run file stored by content"
        );
        let all = remote.manifests(None).await.unwrap();
        assert!(
            all.iter()
                .all(|m| m.run_files.len() == lavender::run::RUN_FILES.len()),
            "{all:?}"
        );

        std::fs::remove_dir_all(dir.path().join("checkpoints")).unwrap();
        let restored =
            super::super::restore::newest(&remote, None, &dir.path().join("checkpoints"))
                .await
                .unwrap()
                .unwrap();
        assert!(restored.path.ends_with("dpo-00-00-01-0001"), "{restored:?}");
        for (name, bytes) in &files {
            assert_eq!(&std::fs::read(run.join(name)).unwrap(), bytes, "{name}");
        }
        let names: Vec<String> = std::fs::read_dir(&run)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(names.is_empty(), "left behind: {names:?}");
        // The checkpoint here, its DPO reference gone: a pull brings the file back.
        std::fs::remove_file(run.join(lavender::run::DPO_REFERENCE_FILE)).unwrap();
        let again = super::super::restore::newest(&remote, None, &dir.path().join("checkpoints"))
            .await
            .unwrap()
            .unwrap();
        assert!(!again.downloaded);
        assert!(run.join(lavender::run::DPO_REFERENCE_FILE).is_file());
    }

    /// What pipeline/rollback.rs does to a checkpoint saved after a divergence.
    fn diverged(run: &Path, name: &str) {
        let hidden = format!("{}{name}", lavender::skips::SET_ASIDE_PREFIX);
        std::fs::rename(run.join(name), run.join(hidden)).unwrap();
    }

    /// The committed remote checkpoints, by name, sorted.
    async fn remote_names(remote: &Remote) -> Vec<String> {
        let mut names: Vec<String> = remote
            .manifests(None)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.checkpoint)
            .collect();
        names.sort();
        names
    }

    fn file_remote(dir: &Path, extra: &str) -> Remote {
        let yaml = format!(
            "replicate: {{url: 'file://{}/remote', require_mounted: false{extra}}}",
            dir.display()
        );
        let config = lavender::config::Config::from_yaml_str(&yaml, "t.yaml").unwrap();
        Remote::open(&config.replicate, &|_| None, dir)
            .unwrap()
            .unwrap()
    }

    fn task(remote: &Remote) -> Task {
        Task {
            remote: remote.clone(),
            throttle: Throttle::new(None),
            keep: 5,
            status: Arc::default(),
            known: BTreeMap::new(),
            gone: BTreeSet::new(),
            changed: BTreeMap::new(),
            observe: false,
            would_have: BTreeSet::new(),
            run_file_hashes: Default::default(),
        }
    }

    /// Two trainings under one prefix (two machines, two experiments): a resume of
    /// the older one continues its lineage (a resumed run names its root); without
    /// `replicate.lineage` the newest copy is not taken blindly but refused, naming
    /// both; with it, only that lineage's newest is restored, and the other is named.
    #[tokio::test]
    async fn a_restore_takes_its_own_lineage_and_names_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("checkpoints");
        let a = root.join("run-2026-01-01_00-00-00");
        let a2 = root.join("run-2026-01-01_01-00-00");
        let b = root.join("run-2026-01-02_00-00-00");
        let a_first = saved(&a, "pretrain-00-00-00-0000", 10);
        saved(&a2, "pretrain-00-00-01-0001", 20);
        lavender::run::record_parent(&a2, &a_first).unwrap();
        saved(&b, "pretrain-00-00-02-0002", 30);
        let remote = file_remote(dir.path(), "");
        let mut t = task(&remote);
        for run in [&a, &a2, &b] {
            t.pass(run).await.unwrap();
        }
        let lineages: BTreeSet<String> = remote
            .manifests(None)
            .await
            .unwrap()
            .iter()
            .map(|m| m.lineage_name().to_string())
            .collect();
        assert_eq!(
            lineages,
            BTreeSet::from([
                "run-2026-01-01_00-00-00".into(),
                "run-2026-01-02_00-00-00".into()
            ])
        );
        std::fs::remove_dir_all(&root).unwrap();
        let e = super::super::restore::newest(&remote, None, &root)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("copies of 2 trainings")
                && e.contains("run-2026-01-01_00-00-00 (newest run-2026-01-01_01-00-00/pretrain-00-00-01-0001)")
                && e.contains("set replicate.lineage"),
            "{e}"
        );
        assert!(!root.exists(), "nothing restored");

        let mine = file_remote(dir.path(), ", lineage: run-2026-01-01_00-00-00");
        let r = super::super::restore::newest(&mine, None, &root)
            .await
            .unwrap()
            .unwrap();
        assert!(
            r.path
                .ends_with("run-2026-01-01_01-00-00/pretrain-00-00-01-0001"),
            "{r:?}"
        );
        assert_eq!(
            r.other_lineages,
            [(
                "run-2026-01-02_00-00-00".to_string(),
                "run-2026-01-02_00-00-00/pretrain-00-00-02-0002".to_string()
            )]
        );
    }

    /// A rollback sets the checkpoints saved after the divergence aside locally
    /// (`.diverged-<name>`); the next pass deletes their remote copies, so a disk lost
    /// after the rollback restores the checkpoint rolled back to, never the diverged one.
    #[tokio::test]
    async fn a_rollback_reaches_the_remote_and_a_restore_never_returns_the_diverged_state() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("checkpoints");
        let run = root.join("run-2026-01-01_00-00-00");
        for (i, step) in [10, 20, 30].iter().enumerate() {
            saved(&run, &format!("pretrain-00-00-0{i}-000{i}"), *step);
        }
        let remote = file_remote(dir.path(), "");
        let mut t = task(&remote);
        t.pass(&run).await.unwrap();
        assert_eq!(remote.manifests(None).await.unwrap().len(), 3);
        diverged(&run, "pretrain-00-00-02-0002");
        t.pass(&run).await.unwrap();
        assert_eq!(
            remote_names(&remote).await,
            ["pretrain-00-00-00-0000", "pretrain-00-00-01-0001"]
        );
        std::fs::remove_dir_all(&root).unwrap();
        let r = super::super::restore::newest(&remote, None, &root)
            .await
            .unwrap()
            .unwrap();
        assert!(r.path.ends_with("pretrain-00-00-01-0001"), "{r:?}");
    }

    /// Observe mode deletes nothing remote either: what `replicate.keep` would drop,
    /// and a rollback's set-aside checkpoint, stay remote (said once in the log).
    #[tokio::test]
    async fn in_observe_mode_nothing_remote_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("checkpoints/run-2026-01-01_00-00-00");
        let remote = file_remote(dir.path(), "");
        let mut t = task(&remote);
        (t.observe, t.keep) = (true, 1);
        for (i, step) in [10, 20, 30].iter().enumerate() {
            saved(&run, &format!("pretrain-00-00-0{i}-000{i}"), *step);
            t.pass(&run).await.unwrap();
        }
        diverged(&run, "pretrain-00-00-02-0002");
        t.pass(&run).await.unwrap();
        assert_eq!(remote.manifests(None).await.unwrap().len(), 3);
        assert_eq!(t.would_have.len(), 3, "{:?}", t.would_have);
    }

    #[test]
    fn remote_retention_and_the_uploader_agree_for_any_pair_of_keep_values() {
        // Each save goes up once, and nothing a retention drops goes up again.
        for (local_keep, remote_keep) in [(5, 2), (2, 5), (3, 3), (1, 1), (8, 1)] {
            let per_save = uploads_per_save(local_keep, remote_keep, 23);
            assert!(
                per_save.iter().all(|&n| n == 1),
                "local {local_keep}, remote {remote_keep}: {per_save:?}"
            );
        }
    }

    fn with(waiting_for_s: f64, max_lag_s: Option<u64>) -> ReplicationStatus {
        let (wake, _) = mpsc::unbounded_channel();
        let status = ReplicationStatus {
            lag_steps: Some(10),
            waiting_since: Some(unix_s(SystemTime::now()) - waiting_for_s),
            max_lag_s,
            ..ReplicationStatus::default()
        };
        Replication {
            wake,
            status: Arc::new(Mutex::new(status)),
        }
        .status()
    }

    #[test]
    fn the_backoff_doubles_from_two_seconds_to_a_minute() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(u32::MAX).as_secs(), 60);
    }

    #[test]
    fn the_lag_is_taken_when_read_and_behind_past_max_lag_s() {
        let s = with(100.0, Some(60));
        assert!(s.lag_s.unwrap() >= 100.0 && s.behind, "{s:?}");
        assert!(!with(10.0, Some(60)).behind);
        assert!(!with(1e6, None).behind, "no max_lag_s: never behind");
        let json = serde_json::to_value(with(5.0, None)).unwrap();
        assert!(json.get("waiting_since").is_none() && json.get("max_lag_s").is_none());
    }
}
