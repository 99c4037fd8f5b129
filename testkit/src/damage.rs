//! Checkpoints damaged on disk under a real daemon, as a disk error, a torn write or
//! a person would: the worker frozen first (SIGSTOP to its process group, so no save
//! completes meanwhile), its checkpoints damaged, then the worker killed (SIGKILL);
//! and what the daemon made of it, read from the run: the `checkpoint_loaded` of
//! the restart, each `checkpoint_damaged` and the copy under `<run>/damaged/`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::daemon::Lavenderd;
use crate::process::{alive, send_signal};
use crate::run_dir::events;
use crate::training::checkpoints;
use crate::wait::wait_until;

const SIGKILL: i32 = 9;
const SIGCONT: i32 = 18;

/// A checkpoint's directory name.
pub fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// `file` cut to half its size: a torn write the rename hid.
pub fn truncate(file: &Path) {
    let len = std::fs::metadata(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .len();
    let f = std::fs::File::options().write(true).open(file).unwrap();
    f.set_len(len / 2).unwrap();
}

/// One byte of `file`'s last bytes flipped, its size unchanged: in a safetensors
/// file that is tensor data, which loads as it is.
pub fn flip_last_byte(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(file, bytes).unwrap();
}

/// The worker stopped in its tracks, and what the run held then.
pub struct Frozen {
    /// The worker's pid (its process group's id).
    pub pid: i32,
    pub run: PathBuf,
    /// The run's complete checkpoints, oldest first.
    pub checkpoints: Vec<PathBuf>,
    /// How many events the run had: what the daemon does next comes after them.
    pub events: usize,
}

impl Frozen {
    /// SIGKILL to the worker's process group; returns once the worker is gone.
    pub fn kill(&self) {
        send_signal(-self.pid, SIGKILL);
        wait_until(
            Duration::from_secs(60),
            "the killed worker to be gone",
            || !alive(self.pid),
        );
    }

    /// SIGCONT: the worker goes on.
    pub fn thaw(&self) {
        send_signal(-self.pid, SIGCONT);
    }

    /// The newest checkpoint and the one before it.
    pub fn newest_two(&self) -> (&Path, &Path) {
        let [.., before, newest] = &self.checkpoints[..] else {
            panic!("fewer than two checkpoints: {:?}", self.checkpoints)
        };
        (before, newest)
    }
}

/// Waits (the pipeline never failing meanwhile) until a worker runs and the run's
/// complete checkpoints satisfy `ready`, then freezes the worker's process group.
/// Every checkpoint it lists has its `checkpoint_saved` event in the run: the daemon
/// heard of each save (it verifies on that event), so a worker frozen between a
/// save's rename and its event is thawed and frozen again after it.
pub fn freeze_when(
    d: &Lavenderd,
    timeout: Duration,
    what: &str,
    mut ready: impl FnMut(&[PathBuf]) -> bool,
) -> Frozen {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let mut found = None;
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        d.wait_status(left, what, |st| {
            assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
            let p = d.pipeline_json();
            let (Some(run), Some(pid)) = (p["run_dir"].as_str(), p["worker"]["pid"].as_i64())
            else {
                return false;
            };
            let run = PathBuf::from(run);
            if run.is_dir() && ready(&checkpoints(&run)) {
                found = Some((pid as i32, run));
                return true;
            }
            false
        });
        let (pid, run) = found.unwrap();
        // Every thread stopped before the listing: a save cannot land after it.
        crate::process::freeze_group(pid);
        let frozen = Frozen {
            pid,
            checkpoints: checkpoints(&run),
            events: events(&run).len(),
            run,
        };
        let told = saved_names(&frozen.run);
        if frozen.checkpoints.iter().all(|c| told.contains(&name(c))) {
            return frozen;
        }
        frozen.thaw();
        // The event is a write away once the worker runs.
        let unheard = |run: &Path| {
            let told = saved_names(run);
            checkpoints(run).iter().any(|c| !told.contains(&name(c)))
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        wait_until(left, "the saves' checkpoint_saved events", || {
            !unheard(&frozen.run)
        });
    }
}

/// The names of the checkpoints `run`'s events say were saved.
fn saved_names(run: &Path) -> Vec<String> {
    events(run)
        .iter()
        .filter(|e| e["kind"] == "checkpoint_saved" || e["kind"] == "final_saved")
        .filter_map(|e| e["path"].as_str().map(|p| name(Path::new(p))))
        .collect()
}

/// [`freeze_when`] the run holds `n` complete checkpoints.
pub fn freeze_at(d: &Lavenderd, n: usize, timeout: Duration) -> Frozen {
    freeze_when(d, timeout, &format!("{n} checkpoint(s)"), |c| c.len() >= n)
}

/// The daemon said a relaunch waits for its storage: one `storage_error` alert in its
/// log naming a file matching `file`, the error (EIO), and that nothing is set aside;
/// then a read again with the backoff.
pub fn assert_storage_wait(d: &Lavenderd, file: &str, timeout: Duration) {
    let log = d.log_with("ALERT step train: checkpoint ", timeout);
    let alert = log
        .lines()
        .find(|l| l.contains("ALERT step train: checkpoint "))
        .unwrap_or_default();
    assert!(
        alert.contains(file)
            && alert.contains("Input/output error")
            && alert.contains("a storage error, not damage; nothing is set aside"),
        "{alert}"
    );
    d.log_with("still unreadable", timeout);
}

/// Waits until the daemon recorded checkpoint `ckpt` of `frozen`'s run as verified.
pub fn wait_verified(frozen: &Frozen, ckpt: &Path, timeout: Duration) {
    let verdict = frozen.run.join(format!(".verdict.{}.json", name(ckpt)));
    wait_until(timeout, "the newest checkpoint verified", || {
        std::fs::read_to_string(&verdict).is_ok_and(|t| t.contains("\"verified\""))
    });
}

/// The run's events after the first `since`.
pub fn events_after(run: &Path, since: usize) -> Vec<Value> {
    events(run).into_iter().skip(since).collect()
}

/// The one `failed` event of `run` after its first `since`: a worker that could not
/// load its checkpoint, reported as `damaged_checkpoint`.
pub fn one_damaged_failure(run: &Path, since: usize) -> Value {
    let failed: Vec<Value> = events_after(run, since)
        .into_iter()
        .filter(|e| e["kind"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert_eq!(
        failed[0]["failure"]["kind"], "damaged_checkpoint",
        "{failed:#?}"
    );
    failed.into_iter().next().unwrap()
}

/// After the kill of `frozen`'s worker: the worker restarted from `from` (its
/// `checkpoint_loaded`, the first after the freeze); each of `damaged`, newest first,
/// was set aside under `<run>/damaged/`, named by a `checkpoint_damaged` event whose
/// reason holds `what` and by an alert in the daemon's log. Returns the load event.
pub fn assert_resumed(
    d: &Lavenderd,
    frozen: &Frozen,
    from: &Path,
    damaged: &[&Path],
    what: &str,
    timeout: Duration,
) -> Value {
    let run = &frozen.run;
    let show = || std::fs::read_to_string(d.daemon_log()).unwrap_or_default();
    let mut loaded = Value::Null;
    d.wait_status(timeout, "a checkpoint_loaded after the kill", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}\n{}", show());
        match events_after(run, frozen.events)
            .into_iter()
            .find(|e| e["kind"] == "checkpoint_loaded")
        {
            Some(e) => {
                loaded = e;
                true
            }
            None => false,
        }
    });
    let path = loaded["path"].as_str().unwrap_or_default();
    assert_eq!(
        Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned()),
        Some(name(from)),
        "resumed from {path}, not {}\n{}",
        from.display(),
        show()
    );
    let said: Vec<Value> = events_after(run, frozen.events)
        .into_iter()
        .filter(|e| e["kind"] == "checkpoint_damaged")
        .collect();
    assert_eq!(said.len(), damaged.len(), "{said:#?}\n{}", show());
    for (dmg, event) in damaged.iter().zip(&said) {
        let n = name(dmg);
        eprintln!("checkpoint_damaged: {}", event["message"]);
        assert_eq!(event["checkpoint"], n.as_str(), "{event}");
        let reason = event["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(what), "{what:?} not in {event}");
        let moved = PathBuf::from(event["moved_to"].as_str().unwrap_or_default());
        assert_eq!(
            moved.parent(),
            Some(run.join("damaged").as_path()),
            "{event}"
        );
        assert!(moved.is_dir(), "{n} not set aside: {event}");
        d.log_with(
            &format!("ALERT step train: checkpoint {n} is damaged"),
            timeout,
        );
    }
    loaded
}

/// The pipeline failed: its `last_error` says nothing intact is left and names each
/// of `damaged`, each set aside under `<run>/damaged/`. Returns the error.
pub fn assert_fails_naming(
    d: &Lavenderd,
    run: &Path,
    damaged: &[PathBuf],
    timeout: Duration,
) -> String {
    let st = d.wait_state("failed", timeout);
    let error = st["pipeline"]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("no intact checkpoint is left to resume from"),
        "{st:#}"
    );
    eprintln!("last_error: {error}");
    for c in damaged {
        assert!(error.contains(&name(c)), "{} not named: {st:#}", name(c));
        assert!(
            run.join("damaged").join(name(c)).is_dir(),
            "{} not set aside",
            name(c)
        );
    }
    error
}

/// The daemon's decision log (`state/decisions.jsonl`): its decisions of `kind`.
pub fn decisions_of(d: &Lavenderd, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(d.state_dir().join("decisions.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["record"] == "decision" && l["kind"] == kind)
        .collect()
}
