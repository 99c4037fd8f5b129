//! Watching the run directory for the status refresher. The heartbeat is replaced
//! by rename, so the directory is watched, not the file. `watcher: native` uses
//! the OS's events: inotify on Linux (`inotify.rs`, read on the runtime), FSEvents
//! and the rest through `notify`'s thread (on Linux that thread wakes the daemon twice
//! as often per heartbeat: benchmark 2c, built with the `bench-notify-watcher`
//! feature, measures it); when the OS refuses (inotify's watch or
//! instance limit is reached) it says so once and polls instead, every
//! `poll_interval`. `watcher: poll` polls from the start (network and external
//! disks, where events do not arrive). Polling lists the directory's entries and
//! stats `heartbeat.json` and `events.jsonl`, with full timestamp precision: a
//! heartbeat rewritten within the same second is still a change.
//!
//! Each change is reported as what it asks of the refresher ([`Change`]): the
//! worker replaces the heartbeat several times a second, and reading it alone
//! costs a small part of reading every file the status is made of.

use std::ffi::OsString;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use lavender::config::Watcher as WatcherKind;
#[cfg(any(not(target_os = "linux"), feature = "bench-notify-watcher"))]
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::change::{Change, DirWatch, change_of_entry};

#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub kind: WatcherKind,
    pub poll_interval: Duration,
    /// The native watcher fails as if the inotify watch limit were reached (`serve`'s
    /// hidden `--simulate-inotify-exhausted`), to show the fallback to polling.
    pub simulate_exhausted: bool,
}

/// What one event asks for; `None`: no change the refresher needs.
#[cfg(any(not(target_os = "linux"), feature = "bench-notify-watcher", test))]
fn change_of(event: &notify::Event) -> Option<Change> {
    use notify::event::{ModifyKind, RenameMode};
    if !is_change(&event.kind) {
        return None;
    }
    // A rename within the directory comes as From (old name), To (new name) and Both
    // (the two again): Both adds nothing, and counted it wakes the refresher twice
    // for one heartbeat.
    if event.kind == notify::EventKind::Modify(ModifyKind::Name(RenameMode::Both)) {
        return None;
    }
    // An event without a path (a lost event queue: `Rescan`) may hide any change.
    if event.paths.is_empty() {
        return Some(Change::Other);
    }
    event
        .paths
        .iter()
        .filter_map(|p| p.file_name().map_or(Some(Change::Other), change_of_entry))
        .max()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Native,
    Poll,
}

#[cfg(any(not(target_os = "linux"), feature = "bench-notify-watcher"))]
impl DirWatch for Box<dyn Watcher + Send> {
    fn watch(&mut self, dir: &Path) -> notify::Result<()> {
        Watcher::watch(self.as_mut(), dir, RecursiveMode::NonRecursive)
    }
    fn unwatch(&mut self, dir: &Path) {
        let _ = Watcher::unwatch(self.as_mut(), dir);
    }
}

/// Polls one directory from a thread of its own (a stat that hangs on a network
/// disk then holds up nothing else).
struct Poller {
    every: Duration,
    tx: mpsc::UnboundedSender<Change>,
    stop: Option<Arc<AtomicBool>>,
}

/// A file as polling compares it: mtime (full precision), size and inode.
type Stamp = Option<(Option<SystemTime>, u64, u64)>;

/// What polling compares: the entries a full read depends on (name and inode: the
/// directory's own mtime also moves with every heartbeat renamed into place, so it
/// cannot tell a heartbeat from a checkpoint), and the heartbeat and events files.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    /// Sorted; `None` when the directory cannot be listed.
    entries: Option<Vec<(OsString, u64)>>,
    heartbeat: Stamp,
    events: Stamp,
}

impl Fingerprint {
    fn take(dir: &Path) -> Fingerprint {
        let stamp = |p: &Path| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.modified().ok(), m.len(), m.ino()))
        };
        let entries = std::fs::read_dir(dir).ok().map(|list| {
            let mut entries: Vec<_> = list
                .filter_map(Result::ok)
                .filter(|e| change_of_entry(&e.file_name()) == Some(Change::Other))
                .map(|e| (e.file_name(), e.ino()))
                .collect();
            entries.sort();
            entries
        });
        Fingerprint {
            entries,
            heartbeat: stamp(&lavender::heartbeat::path(dir)),
            events: stamp(&lavender::events::path(dir)),
        }
    }

    /// What changed from `before` to `self` asks for.
    fn change_since(&self, before: &Fingerprint) -> Option<Change> {
        if self.entries != before.entries {
            Some(Change::Other)
        } else if self.heartbeat != before.heartbeat {
            Some(Change::Heartbeat)
        } else if self.events != before.events {
            Some(Change::Events)
        } else {
            None
        }
    }
}

impl DirWatch for Poller {
    fn watch(&mut self, dir: &Path) -> notify::Result<()> {
        if !dir.is_dir() {
            return Err(notify::Error::path_not_found().add_path(dir.to_path_buf()));
        }
        self.unwatch(dir);
        // Taken before returning, so a change right after `watch` (before the caller's
        // next read) is not folded into the starting point.
        let mut last = Fingerprint::take(dir);
        let stop = Arc::new(AtomicBool::new(false));
        let (dir, every, tx, flag) = (dir.to_path_buf(), self.every, self.tx.clone(), stop.clone());
        std::thread::Builder::new()
            .name("lavenderd-poll".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(every);
                    let now = Fingerprint::take(&dir);
                    if let Some(change) = now.change_since(&last)
                        && tx.send(change).is_err()
                    {
                        return;
                    }
                    last = now;
                }
            })
            .map_err(notify::Error::io)?;
        self.stop = Some(stop);
        Ok(())
    }

    fn unwatch(&mut self, _dir: &Path) {
        if let Some(stop) = self.stop.take() {
            stop.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Watches one directory at a time and sends what each change in it asks of the
/// refresher (changes to files neither the status nor the feed reads are left out).
pub struct RunDirWatcher {
    inner: Option<(Backend, Box<dyn DirWatch>)>,
    watched: Option<PathBuf>,
    tx: mpsc::UnboundedSender<Change>,
    poll_interval: Duration,
    force_exhausted: bool,
}

impl RunDirWatcher {
    pub fn new(opts: &WatchOptions, tx: mpsc::UnboundedSender<Change>) -> RunDirWatcher {
        let mut w = RunDirWatcher {
            inner: None,
            watched: None,
            tx,
            poll_interval: opts.poll_interval,
            force_exhausted: opts.simulate_exhausted,
        };
        w.inner = match opts.kind {
            WatcherKind::Native => match w.native() {
                Ok(n) => Some((Backend::Native, n)),
                Err(e) => Some(w.fall_back(&e, None)),
            },
            WatcherKind::Poll => Some((Backend::Poll, w.poll())),
        };
        w
    }

    #[cfg(test)]
    pub fn backend(&self) -> Option<Backend> {
        self.inner.as_ref().map(|(b, _)| *b)
    }

    #[cfg(test)]
    pub fn watched(&self) -> Option<&Path> {
        self.watched.as_deref()
    }

    /// Watches `dir` instead of what was watched before (`None`: nothing).
    pub fn watch(&mut self, dir: Option<&Path>) {
        if self.watched.as_deref() == dir {
            return;
        }
        let Some((backend, w)) = self.inner.as_mut() else {
            return;
        };
        let backend = *backend;
        if let Some(old) = self.watched.take() {
            w.unwatch(&old);
        }
        let Some(dir) = dir else { return };
        let result = if backend == Backend::Native && self.force_exhausted {
            Err(notify::Error::new(notify::ErrorKind::MaxFilesWatch))
        } else {
            w.watch(dir)
        };
        match result {
            Ok(()) => self.watched = Some(dir.to_path_buf()),
            Err(e) if backend == Backend::Native && is_limit(&e) => {
                let (backend, mut poller) = self.fall_back(&e, Some(dir));
                match poller.watch(dir) {
                    Ok(()) => self.watched = Some(dir.to_path_buf()),
                    Err(e) => tracing::warn!(
                        dir = %dir.display(),
                        "cannot poll the run directory either ({e}); status refreshes on the periodic tick only"
                    ),
                }
                self.inner = Some((backend, poller));
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "cannot watch the run directory: {e}")
            }
        }
    }

    #[cfg(any(not(target_os = "linux"), feature = "bench-notify-watcher"))]
    fn handler(&self) -> impl notify::EventHandler {
        let tx = self.tx.clone();
        move |res: notify::Result<notify::Event>| {
            // An error from the backend (a lost event queue, say): re-read to be safe.
            let change = res.map_or(Some(Change::Other), |event| change_of(&event));
            if let Some(change) = change {
                let _ = tx.send(change);
            }
        }
    }

    #[cfg(all(target_os = "linux", not(feature = "bench-notify-watcher")))]
    fn native(&self) -> notify::Result<Box<dyn DirWatch>> {
        let w = super::inotify::InotifyDir::new(self.tx.clone()).map_err(notify::Error::io)?;
        Ok(Box::new(w))
    }

    #[cfg(any(not(target_os = "linux"), feature = "bench-notify-watcher"))]
    fn native(&self) -> notify::Result<Box<dyn DirWatch>> {
        let w: Box<dyn Watcher + Send> = Box::new(notify::recommended_watcher(self.handler())?);
        Ok(Box::new(w))
    }

    fn poll(&self) -> Box<dyn DirWatch> {
        Box::new(Poller {
            every: self.poll_interval,
            tx: self.tx.clone(),
            stop: None,
        })
    }

    fn fall_back(&self, why: &notify::Error, dir: Option<&Path>) -> (Backend, Box<dyn DirWatch>) {
        let what = dir.map_or_else(
            || "the run directory".to_string(),
            |d| d.display().to_string(),
        );
        let ms = self.poll_interval.as_millis();
        if is_limit(why) {
            tracing::warn!(
                "file events unavailable: the inotify limit is reached ({why}); polling {what} every {ms} ms instead. \
                 Raise the limit (e.g. `sudo sysctl fs.inotify.max_user_watches=524288 fs.inotify.max_user_instances=512`) \
                 or set supervisor.watcher: poll to silence this warning"
            );
        } else {
            tracing::warn!(
                "file events unavailable ({why}); polling {what} every {ms} ms instead (supervisor.watcher: poll silences this warning)"
            );
        }
        (Backend::Poll, self.poll())
    }
}

/// The OS refused a watch for lack of resources: inotify's watch limit (ENOSPC,
/// `max_user_watches`) or instance limit (EMFILE, `max_user_instances`).
fn is_limit(e: &notify::Error) -> bool {
    match &e.kind {
        notify::ErrorKind::MaxFilesWatch => true,
        notify::ErrorKind::Io(io) => matches!(
            io.raw_os_error(),
            Some(code) if code == nix::libc::ENOSPC || code == nix::libc::EMFILE || code == nix::libc::ENFILE
        ),
        _ => false,
    }
}

/// Opening or reading a file is no change: the refresher's own reads would
/// otherwise wake it again and again. A file closed after writing is one.
#[cfg(any(not(target_os = "linux"), feature = "bench-notify-watcher", test))]
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        notify::EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        notify::EventKind::Access(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::log_history::SIDECAR;
    use std::ffi::OsStr;

    #[test]
    fn limits_are_told_apart_from_other_errors() {
        assert!(is_limit(&notify::Error::new(
            notify::ErrorKind::MaxFilesWatch
        )));
        assert!(is_limit(&notify::Error::io(
            std::io::Error::from_raw_os_error(nix::libc::EMFILE)
        )));
        assert!(!is_limit(&notify::Error::path_not_found()));
    }

    /// Waits for the next change, then for any that follow within 60 ms.
    async fn changes_after(
        rx: &mut mpsc::UnboundedReceiver<Change>,
        write: impl FnOnce(),
    ) -> Vec<Change> {
        write();
        let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a change event")
            .unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let mut all = vec![first];
        while let Ok(c) = rx.try_recv() {
            all.push(c);
        }
        all
    }

    /// Changes to the heartbeat, to a checkpoint and to the event log are told
    /// apart; per-step logs are not reported.
    async fn reports_what_changed(w: &mut RunDirWatcher, rx: &mut mpsc::UnboundedReceiver<Change>) {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        w.watch(Some(run));
        assert_eq!(w.watched(), Some(run));
        // Two rewrites within one second are two changes.
        for text in [&b"{\"step\":1}"[..], &b"{\"step\":2}"[..]] {
            let seen = changes_after(rx, || {
                std::fs::write(run.join(SIDECAR), text).unwrap();
                lavender::atomic::write_file(&lavender::heartbeat::path(run), text).unwrap();
            })
            .await;
            assert!(
                !seen.is_empty() && seen.iter().all(|c| *c == Change::Heartbeat),
                "{seen:?}"
            );
        }
        let seen = changes_after(rx, || {
            std::fs::create_dir(run.join(".tmp-ckpt-1")).unwrap();
            std::fs::rename(run.join(".tmp-ckpt-1"), run.join("ckpt-1")).unwrap();
        })
        .await;
        assert_eq!(seen.iter().max(), Some(&Change::Other), "{seen:?}");
        let seen = changes_after(rx, || {
            std::fs::write(lavender::events::path(run), "{}\n").unwrap();
        })
        .await;
        assert!(seen.iter().all(|c| *c == Change::Events), "{seen:?}");
    }

    /// A native watcher polling every 20 ms when it falls back; `exhausted` makes
    /// inotify refuse it.
    fn native_watcher(exhausted: bool) -> (RunDirWatcher, mpsc::UnboundedReceiver<Change>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let opts = WatchOptions {
            kind: WatcherKind::Native,
            poll_interval: Duration::from_millis(20),
            simulate_exhausted: exhausted,
        };
        (RunDirWatcher::new(&opts, tx), rx)
    }

    #[tokio::test]
    async fn native_events_report_changes() {
        let (mut w, mut rx) = native_watcher(false);
        reports_what_changed(&mut w, &mut rx).await;
        assert_eq!(w.backend(), Some(Backend::Native));
    }

    #[tokio::test]
    async fn a_new_run_directory_is_followed_and_the_old_one_no_longer() {
        let (old, new) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (mut w, mut rx) = native_watcher(false);
        w.watch(Some(old.path()));
        w.watch(Some(new.path()));
        // A heartbeat in the old directory, then an event line in the new one: the
        // events of one inotify instance come in order, so once the new line is
        // reported, a report of the old heartbeat would have come with it or before.
        // (What the switch itself reports, `Other`, is not the point here.)
        lavender::atomic::write_file(&lavender::heartbeat::path(old.path()), b"{}").unwrap();
        std::fs::write(lavender::events::path(new.path()), "{}\n").unwrap();
        let mut seen = Vec::new();
        while !seen.contains(&Change::Events) {
            let next = tokio::time::timeout(Duration::from_secs(5), rx.recv());
            seen.push(next.await.expect("the new directory's event line").unwrap());
        }
        // The rest of the batch that reported it.
        while let Ok(c) = rx.try_recv() {
            seen.push(c);
        }
        assert!(
            !seen.contains(&Change::Heartbeat),
            "the old directory still reports: {seen:?}"
        );
        let seen = changes_after(&mut rx, || {
            lavender::atomic::write_file(&lavender::heartbeat::path(new.path()), b"{}").unwrap();
        })
        .await;
        assert!(seen.contains(&Change::Heartbeat), "{seen:?}");
    }

    #[tokio::test]
    async fn a_refused_native_watch_falls_back_to_polling_that_reports_changes() {
        let (mut w, mut rx) = native_watcher(true);
        reports_what_changed(&mut w, &mut rx).await;
        assert_eq!(w.backend(), Some(Backend::Poll));
    }

    #[tokio::test]
    async fn reading_the_directory_or_appending_a_log_line_is_no_change() {
        let dir = tempfile::tempdir().unwrap();
        lavender::atomic::write_file(&dir.path().join("heartbeat.json"), b"{}").unwrap();
        let (mut w, mut rx) = native_watcher(false);
        w.watch(Some(dir.path()));
        std::fs::read(dir.path().join("heartbeat.json")).unwrap();
        std::fs::read_dir(dir.path()).unwrap().for_each(drop);
        std::fs::write(dir.path().join(SIDECAR), "{}\n").unwrap();
        std::fs::write(dir.path().join(lavender::trainlog::FILE), "SAVE\n").unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            rx.try_recv().is_err(),
            "a read or a log line woke the refresher"
        );
    }

    #[test]
    fn entries_are_told_apart_by_name() {
        let of = |n: &str| change_of_entry(OsStr::new(n));
        assert_eq!(of("heartbeat.json"), Some(Change::Heartbeat));
        assert_eq!(of("events.jsonl"), Some(Change::Events));
        for ignored in [
            ".tmp-heartbeat.json-123",
            ".tmp-pretrain-16-08-47-0003",
            "log_history.jsonl",
            "log_history.json",
            "train.log",
        ] {
            assert_eq!(of(ignored), None, "{ignored}");
        }
        for full in [
            "pretrain-16-08-47-0003",
            "checkpoint-500",
            "hard-examples.bin",
        ] {
            assert_eq!(of(full), Some(Change::Other), "{full}");
        }
    }

    #[test]
    fn events_ask_for_the_most_their_paths_ask_for() {
        use notify::EventKind;
        use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
        let run = Path::new("/data/checkpoints/run-1");
        let event = |kind, names: &[&str]| {
            names
                .iter()
                .fold(notify::Event::new(kind), |e, n| e.add_path(run.join(n)))
        };
        let to = EventKind::Modify(ModifyKind::Name(RenameMode::To));
        let both = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
        let opened = EventKind::Access(AccessKind::Open(AccessMode::Any));
        let cases = [
            (event(to, &["heartbeat.json"]), Some(Change::Heartbeat)),
            (event(closed, &["heartbeat.json"]), Some(Change::Heartbeat)),
            (event(opened, &["heartbeat.json"]), None),
            // The rename's To already said it.
            (
                event(both, &[".tmp-heartbeat.json-1", "heartbeat.json"]),
                None,
            ),
            (event(to, &["ckpt-1"]), Some(Change::Other)),
            (event(closed, &["log_history.jsonl"]), None),
            (
                event(EventKind::Any, &["heartbeat.json", "ckpt-1"]),
                Some(Change::Other),
            ),
            // The directory itself (removed, say).
            (
                notify::Event::new(EventKind::Any).add_path(run.into()),
                Some(Change::Other),
            ),
            // A lost event queue.
            (
                notify::Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan),
                Some(Change::Other),
            ),
        ];
        for (e, want) in cases {
            assert_eq!(change_of(&e), want, "{e:?}");
        }
    }

    #[test]
    fn polling_tells_a_heartbeat_from_a_checkpoint() {
        let stamp = |n: u64| Some((None, n, n));
        let base = Fingerprint {
            entries: Some(vec![("ckpt-1".into(), 7)]),
            heartbeat: stamp(1),
            events: stamp(1),
        };
        let beat = Fingerprint {
            heartbeat: stamp(2),
            ..base.clone()
        };
        let event = Fingerprint {
            events: stamp(2),
            ..base.clone()
        };
        let saved = Fingerprint {
            entries: Some(vec![("ckpt-1".into(), 7), ("ckpt-2".into(), 8)]),
            ..beat.clone()
        };
        let gone = Fingerprint {
            entries: None,
            ..base.clone()
        };
        assert_eq!(base.change_since(&base), None);
        assert_eq!(beat.change_since(&base), Some(Change::Heartbeat));
        assert_eq!(event.change_since(&base), Some(Change::Events));
        assert_eq!(saved.change_since(&base), Some(Change::Other));
        assert_eq!(gone.change_since(&base), Some(Change::Other));
    }
}
