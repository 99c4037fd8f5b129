//! The disk never surprises the run: the real `lavenderd` supervising the real
//! `lavender-worker` with the whole data root on a small tmpfs. The worker is frozen
//! (SIGSTOP, so no save completes meanwhile) while the test fills the tmpfs with a
//! file of its own, then let go.
//!
//! - Filled so the next save cannot fit and nothing can be dropped
//!   (`keep_checkpoints: 1`): the save fails with `ENOSPC`, the worker removes
//!   what it half wrote and exits `disk_full`; the latest verified checkpoint is
//!   byte-identical, the pipeline waits (`waiting_for_disk`, `pipeline.disk_wait`
//!   with the numbers), and once the test deletes its file the run resumes by
//!   itself and finishes, with no restart counted.
//! - Filled so the next save fits only once the oldest checkpoint goes
//!   (`keep_checkpoints: 3`): the daemon applies retention early (the decision log
//!   names what it dropped), the newest and the newest verified stay, and the next
//!   save is written with the test's file still in place: the run never waits.
//!
//! The tmpfs is mounted with `mount -t tmpfs` (root); a machine where that is not
//! permitted fails these tests, saying so. (`EDQUOT`, a quota, is handled as
//! `ENOSPC` is: `lavender::failure::is_disk_full`, unit-tested; tmpfs quotas
//! `usrquota` are not built into every kernel.)

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lavender_testkit::{Lavenderd, wait_until};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(180);
const MIB: u64 = 1024 * 1024;

/// A tmpfs mounted at `dir`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size_mib: u64) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "these tests need a small tmpfs for the data root, and `mount -t tmpfs -o size={size_mib}m tmpfs {}` was refused ({}): run them as root, or where mounting tmpfs is permitted",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The train step alone on the synthetic tokens: a save every 50 steps, `keep` kept.
fn config(keep: u32) -> String {
    lavender_testkit::training::TrainOnly {
        worker: WORKER,
        model: "{n_layer: 2, n_head: 4, n_embd: 256, n_positions: 32, dropout: 0.0, layer_norm_epsilon: 1.0e-5}",
        keep_checkpoints: keep,
        stages: "    - {name: pretrain, steps: 300, lr: 3.0e-3, checkpoint_every: 50}",
        supervisor: "",
        notify: "  disk_floor_mib: 0",
        extra: "",
    }
    .yaml()
}

/// The daemon on a data root that is a fresh tmpfs of `size_mib`; the mount is
/// dropped after the daemon (declared first).
fn daemon(dir: &Path, keep: u32, size_mib: u64) -> (Tmpfs, Lavenderd) {
    let fs = Tmpfs::mount(&dir.join("data"), size_mib);
    lavender_testkit::training::write_tokens(&dir.join("data"));
    let mut d = Lavenderd::with_real_worker(dir, &config(keep));
    d.serve();
    d.start(&[]);
    (fs, d)
}

/// Bytes free to a writer on the filesystem holding `path`.
fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    #[allow(clippy::unnecessary_cast)]
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    free
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Every file of `ckpt` with its bytes, by name.
fn contents(ckpt: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(ckpt)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Waits for `n` checkpoints, then freezes the worker's group at a settled moment;
/// returns the worker's pid, the checkpoints (oldest first) and the newest, which
/// the daemon verified.
fn freeze_verified(d: &Lavenderd, n: u64) -> (i32, Vec<PathBuf>, PathBuf) {
    let st = d.wait_status(T, &format!("{n} checkpoints, a worker training"), |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["training"]["checkpoints"].as_u64().unwrap_or(0) >= n
            && st["pipeline"]["pid"].as_i64().is_some()
    });
    let pid = st["pipeline"]["pid"].as_i64().unwrap() as i32;
    // Settled: no save under way (frozen inside one, the part already staged would
    // shrink what the next save needs) and the newest checkpoint on disk verified
    // (frozen before it announced a save, the daemon would wait for it for ever).
    let staged = || {
        std::fs::read_dir(d.run_dir()).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".tmp-")
        })
    };
    let settled = |st: &Value| {
        let newest = lavender_testkit::training::checkpoints(&d.run_dir())
            .last()
            .map(|c| name(c));
        !staged()
            && newest.is_some()
            && st["training"]["latest_verified_checkpoint"].as_str() == newest.as_deref()
    };
    let st = loop {
        lavender_testkit::freeze_group(pid);
        let st = d.status();
        if settled(&st) {
            break st;
        }
        lavender_testkit::send_signal(-pid, 18); // SIGCONT
        d.wait_status(T, "the save under way committed and verified", |st| {
            assert_eq!(st["pipeline"]["state"], "running", "{st:#}");
            settled(st)
        });
    };
    let verified = st["training"]["latest_verified_checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    let ckpts = lavender_testkit::training::checkpoints(&d.run_dir());
    let verified = ckpts
        .iter()
        .find(|c| name(c) == verified)
        .unwrap_or_else(|| panic!("{verified} not in {ckpts:?}"))
        .clone();
    (pid, ckpts, verified)
}

/// Writes a file of real bytes (tmpfs keeps no holes) under `root` until `leave`
/// bytes are free.
fn fill(root: &Path, leave: u64) -> PathBuf {
    let path = root.join("filler.bin");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xa5u8; MIB as usize];
    loop {
        let free = free_bytes(root);
        if free <= leave {
            break;
        }
        let n = (free - leave).min(MIB) as usize;
        f.write_all(&chunk[..n]).unwrap();
        f.flush().unwrap();
    }
    f.sync_all().unwrap();
    path
}

fn decisions(d: &Lavenderd) -> Vec<Value> {
    std::fs::read_to_string(d.state_dir().join("decisions.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_save_that_finds_the_disk_full_waits_and_resumes_by_itself_once_space_is_freed() {
    let dir = tempfile::tempdir().unwrap();
    let (_fs, d) = daemon(dir.path(), 1, 256);
    let (pid, ckpts, verified) = freeze_verified(&d, 1);
    // The steady state of `keep_checkpoints: 1`: nothing older than the newest
    // verified, so early retention has nothing to drop.
    for older in ckpts.iter().take_while(|c| **c != verified) {
        // The daemon's retention (keep 1) may have taken it already.
        if let Err(e) = std::fs::remove_dir_all(older) {
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::NotFound,
                "{}: {e}",
                older.display()
            );
        }
    }
    let before = contents(&verified);
    let size = dir_bytes(ckpts.last().unwrap());
    // Half a save's room: the heartbeats and logs fit, the next save does not.
    let filler = fill(&d.data_root, size / 2);
    lavender_testkit::send_signal(-pid, 18); // SIGCONT

    let log = d.daemon_log();
    let show = || std::fs::read_to_string(&log).unwrap_or_default();
    let st = d.wait_status(T, "the pipeline to wait for disk space", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}\n{}", show());
        st["pipeline"]["state"] == "waiting_for_disk"
            && st["pipeline"]["disk_wait"]["need_bytes"]
                .as_u64()
                .unwrap_or(0)
                > 0
    });
    eprintln!("waiting: {:#}", st["pipeline"]["disk_wait"]);
    let wait = &st["pipeline"]["disk_wait"];
    let (need, free) = (
        wait["need_bytes"].as_u64().unwrap(),
        wait["free_bytes"].as_u64().unwrap(),
    );
    assert!(need > free, "{wait:#}");
    assert!(
        need >= size,
        "the need covers a save of {size} bytes: {wait:#}"
    );
    assert_eq!(
        wait["path"].as_str().unwrap(),
        d.data_root.display().to_string(),
        "{wait:#}"
    );
    assert!(
        wait["message"].as_str().unwrap().contains("free under"),
        "{wait:#}"
    );
    assert_eq!(st["pipeline"]["failure"]["kind"], "disk_full", "{st:#}");
    assert_eq!(
        st["pipeline"]["restarts"],
        0,
        "not a crash restart: {st:#}\n{}\n{:#?}",
        show(),
        decisions(&d)
    );
    assert!(d.worker_pid().is_none(), "no worker while waiting");
    // The latest verified checkpoint as it was, and nothing half written left.
    assert!(verified.is_dir(), "{} is gone", verified.display());
    assert!(contents(&verified) == before, "{} changed", name(&verified));
    let leftovers: Vec<String> = std::fs::read_dir(d.run_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "partial saves left: {leftovers:?}");
    let said = d.log_with("ALERT step train: a save found the disk full", T);
    assert!(said.contains("No space left on device"), "{said}");
    let text = d.run(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("waiting_for_disk") && text.contains("waiting:"),
        "{text}"
    );

    // Told once, however many checks follow.
    let told = decisions(&d)
        .iter()
        .filter(|v| v["kind"] == "wait_for_disk")
        .count();
    assert_eq!(told, 1, "{:#?}", decisions(&d));

    std::fs::remove_file(&filler).unwrap();
    d.wait_status(T, "the run to resume and finish", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}\n{}", show());
        if st["pipeline"]["state"] == "running" {
            assert!(st["pipeline"]["disk_wait"].is_null(), "{st:#}");
        }
        st["pipeline"]["state"] == "finished"
    });
    d.log_with("step train: space is back under", T);
    let kinds: Vec<String> = decisions(&d)
        .iter()
        .filter_map(|v| v["kind"].as_str().map(String::from))
        .collect();
    assert!(
        kinds.contains(&"wait_for_disk".into()) && kinds.contains(&"disk_resume".into()),
        "{kinds:?}"
    );
    let st = d.status();
    assert_eq!(st["pipeline"]["restarts"], 0, "{st:#}");
    assert_eq!(st["training"]["step"], 300, "{st:#}");
}

#[test]
fn a_stop_while_waiting_for_disk_cancels_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let (_fs, d) = daemon(dir.path(), 1, 256);
    let (pid, ckpts, verified) = freeze_verified(&d, 1);
    for older in ckpts.iter().take_while(|c| **c != verified) {
        // The daemon's retention (keep 1) may have taken it already.
        if let Err(e) = std::fs::remove_dir_all(older) {
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::NotFound,
                "{}: {e}",
                older.display()
            );
        }
    }
    let filler = fill(&d.data_root, dir_bytes(ckpts.last().unwrap()) / 2);
    lavender_testkit::send_signal(-pid, 18); // SIGCONT
    d.wait_state("waiting_for_disk", T);
    let out = d.run(&["stop"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        said.contains("cancelled the pending restart"),
        "{said}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(d.daemon_log()).unwrap_or_default()
    );
    let st = d.wait_state("stopped", T);
    assert!(st["pipeline"]["disk_wait"].is_null(), "{st:#}");
    assert!(d.worker_pid().is_none());
    assert!(verified.is_dir());
    // Space back: nothing resumes a stopped pipeline but a start.
    std::fs::remove_file(&filler).unwrap();
    let out = d.run(&["start", "--resume", "latest"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d.wait_state("finished", T);
}

#[test]
fn early_retention_makes_room_for_the_next_save_and_keeps_the_newest_verified() {
    let dir = tempfile::tempdir().unwrap();
    let (_fs, d) = daemon(dir.path(), 3, 256);
    let (pid, ckpts, verified) = freeze_verified(&d, 3);
    let [oldest, .., newest] = &ckpts[..] else {
        panic!("{ckpts:?}")
    };
    assert_ne!(*oldest, verified, "{ckpts:?}");
    let size = dir_bytes(newest);
    // Half a save free: short by the rule (× 1.1); the oldest's bytes make it fit.
    let filler = fill(&d.data_root, size / 2);
    wait_until(T, "early retention in the decision log", || {
        decisions(&d).iter().any(|v| v["kind"] == "early_retention")
    });
    let decision = decisions(&d)
        .into_iter()
        .find(|v| v["kind"] == "early_retention")
        .unwrap();
    eprintln!("decision: {decision:#}");
    let did = decision["did"].as_str().unwrap();
    // The oldest left, older than the newest verified (the daemon's own retention may
    // have taken the one listed first after a save landed before the freeze).
    let dropped = ckpts
        .iter()
        .take_while(|c| **c != verified)
        .find(|c| did.contains(&name(c)))
        .unwrap_or_else(|| panic!("none older than {} in {decision:#}", name(&verified)));
    assert!(!dropped.exists(), "{} still there", name(dropped));
    assert!(!oldest.exists(), "{} still there", name(oldest));
    assert!(newest.is_dir(), "the newest stays");
    assert!(verified.is_dir(), "the newest verified stays");
    assert_eq!(decision["rule"]["key"], "training.keep_checkpoints");
    assert!(
        decision["saw"]["note"]
            .as_str()
            .unwrap()
            .contains("free under"),
        "{decision:#}"
    );
    // What retention freed makes room for a whole save, the filler still in place.
    let free = free_bytes(&d.data_root);
    assert!(
        free >= size,
        "{free} bytes free after early retention, a save is {size}"
    );
    // The next save, with the filler still in place: it fits, and the run never waits.
    lavender_testkit::send_signal(-pid, 18); // SIGCONT
    let log = d.daemon_log();
    let show = || std::fs::read_to_string(&log).unwrap_or_default();
    let never_waits = |st: &Value| {
        assert!(
            !["failed", "waiting_for_disk"].contains(&st["pipeline"]["state"].as_str().unwrap()),
            "{st:#}\n{}",
            show()
        );
        assert!(
            !decisions(&d).iter().any(|v| v["kind"] == "wait_for_disk"),
            "{:#?}",
            decisions(&d)
        );
    };
    let newer = |c: &PathBuf| !ckpts.contains(c);
    d.wait_status(T, "a save newer than the newest before", |st| {
        never_waits(st);
        lavender_testkit::training::checkpoints(&d.run_dir())
            .iter()
            .any(newer)
    });
    assert!(filler.exists());
    // Room again, so the saves that follow need no more of it.
    std::fs::remove_file(&filler).unwrap();
    d.wait_status(T, "the run to finish", |st| {
        never_waits(st);
        st["pipeline"]["state"] == "finished"
    });
}
