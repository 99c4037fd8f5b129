//! The room's task: one thread (`checkpoints`, low CPU and idle I/O priority) follows
//! the supervised run. Told by the status refresher's change stream that the run's
//! files changed ([`Lifecycle::looked`]), it reads what `events.jsonl` gained itself
//! (its own offset; a new run, or a daemon restart, from the first line) and, after
//! a save, a rollback's `data_skipped` or the first look at a run, runs one pass in
//! the order of [`order::next`]: read back → record the verdicts → retention →
//! replication. A storage error stops the pass before retention and is read again
//! after a backoff ([`Backoff::storage`]); saves meanwhile join the pending pass.
//! What each pass did goes to [`Report`], the room's one face to the rest.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use lavender::events::{self, kind};
use tokio::sync::watch;

use super::order::{self, Duty, Found, Retaining, Rules};
use super::retain::{Plan, Retention};
use super::verify;
use crate::backoff::Backoff;
use crate::replicate::Replication;

/// How long a storage error holds retention and replication back; past it, they run
/// (retention never drops anything newer than the newest checkpoint found intact,
/// so what could not be read stays) and the error stays in the log and the report.
pub const STORAGE_WAIT: Duration = Duration::from_secs(600);

/// What the room did, for whoever shows it (the status, `/metrics`, tests).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Passes run since the daemon started.
    pub passes: u64,
    /// Checkpoints read back and found intact, damaged, since the daemon started.
    pub verified: u64,
    pub damaged: u64,
    /// Checkpoints retention deleted since the daemon started.
    pub dropped: u64,
    /// The duties of the last pass, in the order they ran.
    pub last: Vec<Duty>,
    /// The storage error the room is waiting on: which checkpoint, what it said.
    pub storage_error: Option<String>,
}

/// The follower's side of the room.
#[derive(Clone)]
pub struct Lifecycle {
    looks: mpsc::Sender<PathBuf>,
    report: watch::Receiver<Report>,
}

impl Lifecycle {
    /// Starts the room's thread: retention decided by `retention`, each pass handed
    /// to `replication` when there is one.
    pub fn start(
        retention: Retention,
        replication: Option<Replication>,
    ) -> std::io::Result<Lifecycle> {
        let (looks, rx) = mpsc::channel::<PathBuf>();
        let (report_tx, report) = watch::channel(Report::default());
        let mut room = Room::new(retention, replication, report_tx);
        std::thread::Builder::new()
            .name("checkpoints".into())
            .spawn(move || {
                verify::lower_priority();
                room.serve(&rx);
            })?;
        Ok(Lifecycle { looks, report })
    }

    /// The run's files changed (the refresher's change stream): read its new events.
    pub fn looked(&self, run_dir: &Path) {
        let _ = self.looks.send(run_dir.to_path_buf());
    }

    /// What the room did so far; changes after each pass.
    pub fn subscribe(&self) -> watch::Receiver<Report> {
        self.report.clone()
    }
}

/// The room's state, on its thread.
pub(super) struct Room {
    retention: Retention,
    replication: Option<Replication>,
    report: watch::Sender<Report>,
    /// The run followed and how far its events were read.
    run: Option<(PathBuf, u64)>,
    /// A pass waiting on a storage error: its retention plan, when it is due again,
    /// how many reads failed in a row, and since when.
    waiting: Option<Waiting>,
}

struct Waiting {
    plan: Plan,
    due: Instant,
    failures: u32,
    since: Instant,
}

impl Room {
    pub(super) fn new(
        retention: Retention,
        replication: Option<Replication>,
        report: watch::Sender<Report>,
    ) -> Room {
        Room {
            retention,
            replication,
            report,
            run: None,
            waiting: None,
        }
    }

    fn serve(&mut self, looks: &mpsc::Receiver<PathBuf>) {
        loop {
            let got = match &self.waiting {
                Some(w) => looks.recv_timeout(w.due.saturating_duration_since(Instant::now())),
                None => looks.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match got {
                Ok(mut run_dir) => {
                    // Looks asked for meanwhile are one look at the latest run.
                    while let Ok(later) = looks.try_recv() {
                        run_dir = later;
                    }
                    self.look(&run_dir);
                }
                Err(RecvTimeoutError::Timeout) => self.retry(),
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Reads what `run_dir`'s events gained and runs a pass when they ask for one.
    pub(super) fn look(&mut self, run_dir: &Path) {
        let new_run = self.run.as_ref().is_none_or(|(dir, _)| dir != run_dir);
        if new_run {
            self.run = Some((run_dir.to_path_buf(), 0));
            self.waiting = None;
        }
        let offset = self.run.as_ref().map_or(0, |(_, o)| *o);
        let batch = match events::read_from(&events::path(run_dir), offset) {
            Ok(batch) => batch,
            Err(e) if e.is_not_found() => Default::default(),
            Err(e) => {
                tracing::warn!(
                    "checkpoints: reading the events of {}: {e}",
                    run_dir.display()
                );
                return;
            }
        };
        if let Some((_, o)) = self.run.as_mut() {
            *o = batch.next_offset;
        }
        let asks = batch.events.iter().any(|e| {
            e.kind == kind::CHECKPOINT_SAVED
                || e.kind == kind::FINAL_SAVED
                || e.kind == kind::DATA_SKIPPED
        });
        // Every batch goes to retention: it follows the worker's `run_started`.
        let plan = self.retention.due(run_dir, &batch.events);
        if let Some(w) = self.waiting.as_mut() {
            // Joins the pass that waits; read again when the backoff is over.
            w.plan = plan.or(std::mem::replace(&mut w.plan, Plan::Nothing));
            return;
        }
        if new_run || asks {
            self.pass(run_dir, plan, None);
        }
    }

    /// The backoff after a storage error is over: the pass that waited, again.
    fn retry(&mut self) {
        let (Some(w), Some((run_dir, _))) = (self.waiting.take(), self.run.clone()) else {
            return;
        };
        self.pass(&run_dir, w.plan, Some((w.failures, w.since)));
    }

    /// One pass over `run_dir` in the room's order; `waited`: the failed reads before
    /// it and since when.
    fn pass(&mut self, run_dir: &Path, plan: Plan, waited: Option<(u32, Instant)>) {
        let rules = Rules {
            retaining: match &plan {
                Plan::Prune(_) => Retaining::Daemon,
                Plan::WouldPrune(_) => Retaining::Observe,
                Plan::Nothing => Retaining::Nobody,
            },
            replicating: self.replication.is_some(),
        };
        let since = waited.map_or_else(Instant::now, |(_, s)| s);
        let mut ran = Vec::new();
        let mut report = self.report.borrow().clone();
        report.passes += 1;
        let mut duty = Duty::Verify;
        while duty != Duty::Rest {
            ran.push(duty);
            let found = match duty {
                Duty::Verify => read_back(run_dir, since, &mut report),
                Duty::Retain => {
                    if let Plan::Prune(p) = &plan {
                        match p.run() {
                            Ok(dropped) => report.dropped += dropped.len() as u64,
                            Err(e) => tracing::warn!("retention in {}: {e}", run_dir.display()),
                        }
                    }
                    Found::Done
                }
                Duty::WouldRetain => {
                    if let Plan::WouldPrune(p) = &plan {
                        p.would_have();
                    }
                    Found::Done
                }
                Duty::Replicate => {
                    if let Some(r) = &self.replication {
                        r.wake(run_dir);
                    }
                    Found::Done
                }
                Duty::RetryLater => {
                    let failures = waited.map_or(1, |(f, _)| f + 1);
                    let wait = Backoff::storage().before(failures);
                    tracing::info!(
                        "checkpoints: retention and replication wait; read again in {} s",
                        wait.as_secs()
                    );
                    self.waiting = Some(Waiting {
                        plan,
                        due: Instant::now() + wait,
                        failures,
                        since,
                    });
                    break;
                }
                Duty::Rest => break,
            };
            duty = order::next(duty, found, rules);
        }
        report.last = ran;
        self.report.send_replace(report);
    }
}

/// The read-back duty: every checkpoint of `run_dir` not checked yet, counted into
/// `report`; a storage error waited on since `since` is `StorageErrorPersists` once
/// past [`STORAGE_WAIT`].
fn read_back(run_dir: &Path, since: Instant, report: &mut Report) -> Found {
    let error = match verify::pass(run_dir) {
        Ok(read) => {
            report.verified += read.verified;
            report.damaged += read.damaged;
            read.storage_error
        }
        Err(e) => {
            tracing::warn!(
                "checkpoints: reading back the checkpoints of {}: {e}",
                run_dir.display()
            );
            Some(e.to_string())
        }
    };
    report.storage_error = error.clone();
    match error {
        None => Found::Done,
        Some(error) if since.elapsed() >= STORAGE_WAIT => {
            tracing::error!(
                "checkpoints: {error} for {} s: retention and replication go on; what could not be read is kept",
                since.elapsed().as_secs()
            );
            Found::StorageErrorPersists
        }
        Some(_) => Found::StorageError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::checkpoint::contents;
    use lavender::checkpoint::list_run_checkpoints;
    use lavender::checkpoint::verdicts::{self, Check};
    use lavender::config::Config;

    use crate::checkpoints::fixture::Run;

    /// The room's run, read back by the daemon from its first save.
    fn run() -> Run {
        let r = crate::checkpoints::fixture::run();
        verdicts::watch(&r.dir).unwrap();
        r
    }

    /// A complete checkpoint with a manifest, and its `checkpoint_saved` event.
    fn save(dir: &Path, n: u32) -> PathBuf {
        crate::checkpoints::fixture::save(dir, "pretrain", n, None, true)
    }

    fn room(r: &Run, keep: u32, observe: bool) -> (Room, watch::Receiver<Report>) {
        let mut config = Config::default();
        config.training.keep_checkpoints = keep;
        if observe {
            config.supervisor.mode = lavender::config::SupervisorMode::Observe;
        }
        let (retention, _) = Retention::new(&config, r.checkpoints.clone());
        let (tx, rx) = watch::channel(Report::default());
        (Room::new(retention, None, tx), rx)
    }

    fn names(dir: &Path) -> Vec<String> {
        list_run_checkpoints(dir)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect()
    }

    /// A save is read back and its verdict recorded before retention runs, so with
    /// `keep_checkpoints: 1` the checkpoint kept is one found intact, and what was
    /// not yet read is never deleted unread.
    #[test]
    fn a_save_is_read_back_before_retention_and_keep_one_keeps_a_verified_one() {
        let r = run();
        let (mut room, report) = room(&r, 1, false);
        save(&r.dir, 1);
        save(&r.dir, 2);
        room.look(&r.dir);
        let got = report.borrow().clone();
        assert_eq!(got.last, [Duty::Verify, Duty::Retain]);
        assert_eq!((got.verified, got.dropped), (2, 1));
        assert_eq!(names(&r.dir), ["pretrain-12-00-02-0002"]);
        assert!(matches!(
            verdicts::read(&r.dir, "pretrain-12-00-02-0002"),
            Check::Done(contents::Verdict::Verified { .. })
        ));
        // Nothing new: no pass.
        room.look(&r.dir);
        assert_eq!(report.borrow().passes, 1);
        save(&r.dir, 3);
        room.look(&r.dir);
        assert_eq!(names(&r.dir), ["pretrain-12-00-03-0003"]);
        assert_eq!(report.borrow().passes, 2);
    }

    /// The newest checkpoint damaged: retention keeps the newest intact one and the
    /// damaged one after it (a resume sets that aside), deleting only what is older.
    #[test]
    fn a_damaged_newest_keeps_the_intact_one_before_it() {
        let r = run();
        let (mut room, report) = room(&r, 1, false);
        save(&r.dir, 1);
        save(&r.dir, 2);
        let newest = save(&r.dir, 3);
        std::fs::write(newest.join("model.safetensors"), "weights X").unwrap();
        room.look(&r.dir);
        assert_eq!(report.borrow().damaged, 1);
        assert_eq!(
            names(&r.dir),
            ["pretrain-12-00-02-0002", "pretrain-12-00-03-0003"]
        );
    }

    /// Observe mode: read back and recorded, nothing deleted.
    #[test]
    fn observe_mode_reads_back_and_deletes_nothing() {
        let r = run();
        let (mut room, report) = room(&r, 1, true);
        for n in 1..=3 {
            save(&r.dir, n);
        }
        room.look(&r.dir);
        assert_eq!(report.borrow().last, [Duty::Verify, Duty::WouldRetain]);
        assert_eq!(report.borrow().verified, 3);
        assert_eq!(names(&r.dir).len(), 3);
    }

    /// A checkpoint the storage cannot read: nothing recorded, nothing deleted; the
    /// saves meanwhile join the pass that waits, which runs whole once it reads.
    #[test]
    fn a_storage_error_holds_retention_back_until_the_read_succeeds() {
        let r = run();
        let (mut room, report) = room(&r, 1, false);
        save(&r.dir, 1);
        let second = save(&r.dir, 2);
        // A file that cannot be read: a loop of symbolic links (ELOOP) in place of
        // the weights, as a storage error that is not damage.
        let weights = second.join("model.safetensors");
        let good = std::fs::read(&weights).unwrap();
        std::fs::remove_file(&weights).unwrap();
        std::os::unix::fs::symlink("model.safetensors", &weights).unwrap();
        room.look(&r.dir);
        let got = report.borrow().clone();
        assert_eq!(got.last, [Duty::Verify, Duty::RetryLater]);
        assert!(
            got.storage_error
                .as_deref()
                .unwrap()
                .contains("pretrain-12-00-02-0002"),
            "{got:?}"
        );
        assert_eq!(names(&r.dir).len(), 2, "nothing deleted");
        assert_eq!(
            verdicts::read(&r.dir, "pretrain-12-00-02-0002"),
            Check::Pending
        );
        // A save while it waits joins the pass; nothing runs before the retry.
        save(&r.dir, 3);
        room.look(&r.dir);
        assert_eq!(report.borrow().passes, 1);
        assert_eq!(names(&r.dir).len(), 3);
        // The storage reads again: the pass runs whole.
        std::fs::remove_file(&weights).unwrap();
        std::fs::write(&weights, good).unwrap();
        room.retry();
        let got = report.borrow().clone();
        assert_eq!(got.last, [Duty::Verify, Duty::Retain]);
        assert_eq!(got.storage_error, None);
        assert_eq!(names(&r.dir), ["pretrain-12-00-03-0003"]);
    }
}
