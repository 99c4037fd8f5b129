//! Watching the run directory for the status refresher. The heartbeat is replaced
//! by rename, so the directory is watched, not the file. `watcher: native` uses
//! the OS's events (inotify, FSEvents); when the OS refuses (inotify's watch or
//! instance limit is reached) it says so once and polls instead, every
//! `poll_interval`. `watcher: poll` polls from the start (network and external
//! disks, where events do not arrive). Polling stats the directory (an entry
//! renamed into place changes its mtime), `heartbeat.json` and `events.jsonl`,
//! with full timestamp precision: a heartbeat rewritten within the same second
//! is still a change.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use lavender::config::Watcher as WatcherKind;
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub kind: WatcherKind,
    pub poll_interval: Duration,
    /// The native watcher fails as if the inotify watch limit were reached (`serve`'s
    /// hidden `--simulate-inotify-exhausted`), to show the fallback to polling.
    pub simulate_exhausted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Native,
    Poll,
}

/// A backend: the OS's events, or a thread that polls.
trait DirWatch: Send {
    fn watch(&mut self, dir: &Path) -> notify::Result<()>;
    fn unwatch(&mut self, dir: &Path);
}

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
    tx: mpsc::UnboundedSender<()>,
    stop: Option<Arc<AtomicBool>>,
}

/// What polling compares: mtime (full precision), size and inode of the directory
/// and of the files the status and the milestones read.
fn fingerprint(dir: &Path) -> Vec<Option<(Option<SystemTime>, u64, u64)>> {
    [
        dir.to_path_buf(),
        lavender::heartbeat::path(dir),
        lavender::events::path(dir),
    ]
    .iter()
    .map(|p| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.modified().ok(), m.len(), m.ino()))
    })
    .collect()
}

impl DirWatch for Poller {
    fn watch(&mut self, dir: &Path) -> notify::Result<()> {
        if !dir.is_dir() {
            return Err(notify::Error::path_not_found().add_path(dir.to_path_buf()));
        }
        self.unwatch(dir);
        // Taken before returning, so a change right after `watch` (before the caller's
        // next read) is not folded into the starting point.
        let mut last = fingerprint(dir);
        let stop = Arc::new(AtomicBool::new(false));
        let (dir, every, tx, flag) = (dir.to_path_buf(), self.every, self.tx.clone(), stop.clone());
        std::thread::Builder::new()
            .name("lavenderd-poll".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(every);
                    let now = fingerprint(&dir);
                    if now != last {
                        last = now;
                        if tx.send(()).is_err() {
                            return;
                        }
                    }
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

/// Watches one directory at a time and sends `()` on every change in it (entries
/// in flight, `.tmp-*`, are left out: their rename into place is the change).
pub struct RunDirWatcher {
    inner: Option<(Backend, Box<dyn DirWatch>)>,
    watched: Option<PathBuf>,
    tx: mpsc::UnboundedSender<()>,
    poll_interval: Duration,
    force_exhausted: bool,
}

impl RunDirWatcher {
    pub fn new(opts: &WatchOptions, tx: mpsc::UnboundedSender<()>) -> RunDirWatcher {
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

    fn handler(&self) -> impl notify::EventHandler {
        let tx = self.tx.clone();
        move |res: notify::Result<notify::Event>| match res {
            Ok(event)
                if is_change(&event.kind)
                    && (event.paths.is_empty() || event.paths.iter().any(|p| !in_flight(p))) =>
            {
                let _ = tx.send(());
            }
            Ok(_) => {}
            // An error from the backend (a lost event queue, say): re-read to be safe.
            Err(_) => {
                let _ = tx.send(());
            }
        }
    }

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
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        notify::EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        notify::EventKind::Access(_) => false,
        _ => true,
    }
}

fn in_flight(path: &Path) -> bool {
    path.file_name().is_some_and(|n| {
        n.to_string_lossy()
            .starts_with(lavender::atomic::TMP_PREFIX)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    async fn reports_a_heartbeat(w: &mut RunDirWatcher, rx: &mut mpsc::UnboundedReceiver<()>) {
        let dir = tempfile::tempdir().unwrap();
        w.watch(Some(dir.path()));
        assert_eq!(w.watched(), Some(dir.path()));
        // Two rewrites within one second are two changes.
        for text in [&b"{\"step\":1}"[..], &b"{\"step\":2}"[..]] {
            lavender::atomic::write_file(&dir.path().join("heartbeat.json"), text).unwrap();
            tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .expect("a change event");
            tokio::time::sleep(Duration::from_millis(60)).await;
            while rx.try_recv().is_ok() {}
        }
    }

    /// A native watcher polling every 20 ms when it falls back; `exhausted` makes
    /// inotify refuse it.
    fn native_watcher(exhausted: bool) -> (RunDirWatcher, mpsc::UnboundedReceiver<()>) {
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
        reports_a_heartbeat(&mut w, &mut rx).await;
        assert_eq!(w.backend(), Some(Backend::Native));
    }

    #[tokio::test]
    async fn a_refused_native_watch_falls_back_to_polling_that_reports_changes() {
        let (mut w, mut rx) = native_watcher(true);
        reports_a_heartbeat(&mut w, &mut rx).await;
        assert_eq!(w.backend(), Some(Backend::Poll));
    }

    #[tokio::test]
    async fn reading_the_directory_is_no_change() {
        let dir = tempfile::tempdir().unwrap();
        lavender::atomic::write_file(&dir.path().join("heartbeat.json"), b"{}").unwrap();
        let (mut w, mut rx) = native_watcher(false);
        w.watch(Some(dir.path()));
        std::fs::read(dir.path().join("heartbeat.json")).unwrap();
        std::fs::read_dir(dir.path()).unwrap().for_each(drop);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(rx.try_recv().is_err(), "a read woke the refresher");
    }

    #[test]
    fn in_flight_entries_are_hidden_temporaries() {
        assert!(in_flight(Path::new("/r/.tmp-heartbeat.json-123")));
        assert!(!in_flight(Path::new("/r/heartbeat.json")));
    }
}
