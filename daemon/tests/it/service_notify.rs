//! `lavenderd serve` under a service manager: sd_notify messages sent to a
//! datagram socket this test owns (READY, WATCHDOG from a live pipeline actor,
//! STATUS, STOPPING, EXTEND_TIMEOUT_USEC), and a worker that carries none of the
//! service manager's variables and runs in its own session.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lavender_testkit::*;

/// One datagram and when it arrived.
#[derive(Clone, Debug)]
struct Message {
    at: Instant,
    text: String,
    /// Whether the daemon's Unix socket existed when it arrived.
    socket_bound: bool,
}

struct NotifySocket {
    path: PathBuf,
    messages: Arc<Mutex<Vec<Message>>>,
}

impl NotifySocket {
    fn bind(dir: &Path, daemon_socket: PathBuf) -> NotifySocket {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let sink = messages.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().unwrap().push(Message {
                    at: Instant::now(),
                    text,
                    socket_bound: daemon_socket.exists(),
                });
            }
        });
        NotifySocket { path, messages }
    }

    fn all(&self) -> Vec<Message> {
        self.messages.lock().unwrap().clone()
    }

    /// Messages with a line `KEY=…`, and that line's value.
    fn values(&self, key: &str) -> Vec<(Instant, String)> {
        let prefix = format!("{key}=");
        self.all()
            .into_iter()
            .flat_map(|m| {
                m.text
                    .lines()
                    .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
                    .map(|v| (m.at, v))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn count(&self, key: &str) -> usize {
        self.values(key).len()
    }
}

/// The daemon as systemd would start it: NOTIFY_SOCKET, WATCHDOG_USEC, LISTEN_*.
struct Daemon {
    child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the daemon as systemd would and waits for its READY=1.
fn serve_under_systemd(env: &Env, watchdog_usec: &str) -> (NotifySocket, Daemon) {
    std::fs::create_dir_all(&env.data_root).unwrap();
    let notify = NotifySocket::bind(env.dir.path(), env.state_dir().join("lavenderd.sock"));
    let log = std::fs::File::create(env.daemon_log()).unwrap();
    let child = env
        .cmd()
        .arg("serve")
        .env("NOTIFY_SOCKET", &notify.path)
        .env("WATCHDOG_USEC", watchdog_usec)
        .env("LISTEN_FDS", "1")
        .env("LISTEN_PID", "1")
        .env("LAVENDER_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let daemon = Daemon { child };
    wait_until(Duration::from_secs(10), "READY=1", || {
        notify.count("READY") > 0
    });
    (notify, daemon)
}

fn proc_stat_field(pid: i32, index_after_comm: usize) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    after
        .split_whitespace()
        .nth(index_after_comm)
        .unwrap()
        .parse()
        .unwrap()
}

fn environ(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap()
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

#[test]
fn serve_speaks_sd_notify_and_the_worker_inherits_none_of_it() {
    let env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "10",
            "--save-ms",
            "2500",
            "--checkpoint-every",
            "1000000",
        ],
        "",
        "[train]",
    );
    let (notify, mut daemon) = serve_under_systemd(&env, "400000");
    let ready = notify
        .all()
        .into_iter()
        .find(|m| m.text.lines().any(|l| l == "READY=1"))
        .unwrap();
    assert!(
        ready.socket_bound,
        "READY=1 came before the Unix socket was bound"
    );
    assert!(
        env.state_dir().join("lavenderd.addr").is_file(),
        "the TCP address is known once ready"
    );

    let out = env.run(&["start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_until(
        Duration::from_secs(10),
        "a STATUS= line with training progress",
        || {
            notify
                .values("STATUS")
                .iter()
                .any(|(_, s)| s.contains("[running] train") && s.contains("loss"))
        },
    );

    // WATCHDOG_USEC=400000: a ping every 200 ms.
    let first = notify.count("WATCHDOG");
    wait_until(Duration::from_secs(5), "repeated WATCHDOG=1", || {
        notify.count("WATCHDOG") >= first + 6
    });
    let pings: Vec<Instant> = notify.values("WATCHDOG").iter().map(|(t, _)| *t).collect();
    let gaps: Vec<Duration> = pings.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<Duration>() / gaps.len() as u32;
    assert!(
        mean >= Duration::from_millis(120) && mean <= Duration::from_millis(350),
        "pings should come at about half of WATCHDOG_USEC (200 ms), mean gap {mean:?}"
    );
    assert!(
        notify.values("WATCHDOG").iter().all(|(_, v)| v == "1"),
        "{:?}",
        notify.values("WATCHDOG")
    );
    let statuses = notify.values("STATUS");
    let distinct: std::collections::BTreeSet<_> = statuses.iter().map(|(_, s)| s).collect();
    assert!(
        distinct.len() >= 2,
        "STATUS= follows the progress: {statuses:?}"
    );
    for pair in statuses.windows(2) {
        assert_ne!(pair[0].1, pair[1].1, "STATUS= is sent only when it changes");
    }

    // The worker: none of the service manager's variables, its own session.
    let worker = env.worker_pid().expect("a worker");
    let vars = environ(worker);
    for var in [
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
    ] {
        assert!(
            !vars.iter().any(|v| v.starts_with(&format!("{var}="))),
            "the worker inherited {var}: {vars:?}"
        );
    }
    assert!(
        vars.iter().any(|v| v.starts_with("LAVENDER_LOG=")),
        "other variables pass through"
    );
    let daemon_pid = daemon.child.id() as i32;
    // /proc/<pid>/stat after the command: state ppid pgrp session …
    assert_eq!(
        proc_stat_field(worker, 2),
        worker as i64,
        "worker leads its process group"
    );
    assert_eq!(
        proc_stat_field(worker, 3),
        worker as i64,
        "worker leads its own session"
    );
    assert_ne!(
        proc_stat_field(worker, 3),
        proc_stat_field(daemon_pid, 3),
        "a service manager killing the daemon's session or group must miss the worker"
    );

    // SIGTERM, as `systemctl stop` sends it: STOPPING=1, then extensions while the
    // worker's 2.5 s save runs, then a clean exit.
    let before_stop = notify.all().len();
    send_signal(daemon_pid, 15);
    let status = daemon.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let after: Vec<Message> = notify.all()[before_stop..].to_vec();
    let stopping = after
        .iter()
        .position(|m| m.text.lines().any(|l| l == "STOPPING=1"))
        .unwrap_or_else(|| panic!("no STOPPING=1 after SIGTERM: {after:?}"));
    let extensions = after[stopping..]
        .iter()
        .filter(|m| {
            m.text
                .lines()
                .any(|l| l.starts_with("EXTEND_TIMEOUT_USEC="))
        })
        .count();
    assert!(
        extensions >= 2,
        "EXTEND_TIMEOUT_USEC is repeated while the save runs: {after:?}"
    );
    assert!(
        after[stopping..].iter().any(|m| m.text == "WATCHDOG=1\n"),
        "the watchdog keeps being fed during a slow stop"
    );
    assert!(!alive(worker), "the stop ended the worker");
    let st: serde_json::Value =
        serde_json::from_slice(&env.run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(st["pipeline"]["state"], "stopped");
    assert!(st["training"]["latest_checkpoint"].is_string(), "{st:#}");
}

/// `lavenderd daemon restart` under systemd: RELOADING=1 (with MONOTONIC_USEC)
/// before the daemon re-executes; the new image, same pid (systemd's MAINPID and
/// `NotifyAccess=main` still hold), says READY=1 again and feeds the watchdog, so
/// the unit is not killed 30 s after an upgrade; it still stops with a save.
#[test]
fn a_restart_alone_says_reloading_then_ready_and_feeds_the_watchdog() {
    let env = Env::new(
        &["--total-steps", "100000", "--step-ms", "10"],
        "",
        "[train]",
    );
    let (notify, mut daemon) = serve_under_systemd(&env, "400000");
    assert_eq!(notify.count("READY"), 1);
    let out = env.run(&["start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    env.wait_step(5, Duration::from_secs(10));
    let worker = env.worker_pid().expect("a worker");

    let before = notify.all().len();
    let out = env.run(&["daemon", "restart"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    wait_until(
        Duration::from_secs(10),
        "READY=1 from the new image",
        || notify.count("READY") == 2,
    );
    let after: Vec<Message> = notify.all()[before..].to_vec();
    let has = |m: &Message, line: &str| m.text.lines().any(|l| l == line);
    let reloading = after
        .iter()
        .position(|m| has(m, "RELOADING=1"))
        .unwrap_or_else(|| panic!("no RELOADING=1 before the restart: {after:?}"));
    assert!(
        after[reloading]
            .text
            .lines()
            .any(|l| l.starts_with("MONOTONIC_USEC=")),
        "{after:?}"
    );
    let ready = after.iter().position(|m| has(m, "READY=1")).unwrap();
    assert!(reloading < ready, "RELOADING=1, then READY=1: {after:?}");
    let pings = notify.count("WATCHDOG");
    wait_until(
        Duration::from_secs(10),
        "WATCHDOG=1 from the new image",
        || notify.count("WATCHDOG") >= pings + 3,
    );
    let health = env.uds("GET", "/healthz", None).unwrap().json();
    assert_eq!(health["pid"], daemon.child.id(), "re-executed in place");
    assert_eq!(env.status()["pipeline"]["pid"], worker, "re-adopted");

    send_signal(daemon.child.id() as i32, 15);
    let status = daemon.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!alive(worker), "the stop ended the worker");
}

/// The pipeline actor blocks (a stop looks for the run's newest checkpoint, and one
/// checkpoint's `trainer_state.json` is a FIFO nobody writes, like a hung network
/// mount): the pings stop though the daemon's other tasks still run, and resume once
/// it unblocks. A free-running timer would have kept pinging.
#[test]
fn a_wedged_pipeline_actor_withholds_the_watchdog_ping() {
    let env = Env::new(
        &["--total-steps", "100000", "--step-ms", "10"],
        "",
        "[train]",
    );
    let (notify, _daemon) = serve_under_systemd(&env, "400000");
    let out = env.run(&["start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    env.wait_step(5, Duration::from_secs(10));
    wait_until(Duration::from_secs(5), "pings", || {
        notify.count("WATCHDOG") >= 3
    });

    let hung = env.run_dir().join("train-00-00-00-9999");
    std::fs::create_dir(&hung).unwrap();
    let fifo = hung.join("trainer_state.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {fifo:?}");
    let mut stop = env
        .cmd()
        .arg("stop")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once the actor blocks in open(2), the pings (every 200 ms) stop: six periods
    // without one.
    wait_until(
        Duration::from_secs(10),
        "WATCHDOG=1 to stop while the pipeline actor is wedged",
        || {
            notify
                .values("WATCHDOG")
                .last()
                .is_some_and(|(at, _)| at.elapsed() >= Duration::from_millis(1200))
        },
    );
    let wedged_at = notify.count("WATCHDOG");
    assert_eq!(
        env.uds("GET", "/healthz", None).map(|r| r.status),
        Some(200),
        "the daemon itself still answers; only the actor is stuck"
    );

    // Unblock: every reader of the FIFO gets a line that is no trainer state.
    std::thread::spawn(move || {
        loop {
            if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&fifo) {
                use std::io::Write as _;
                let _ = w.write_all(b"not a trainer state\n");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    wait_until(Duration::from_secs(5), "pings to resume", || {
        notify.count("WATCHDOG") >= wedged_at + 3
    });
    let status = stop.wait().unwrap();
    assert!(
        status.success(),
        "the stop ends once the actor is free: {status:?}"
    );
}

/// `launch.backend: slurm` with an `sbatch` that takes 5 s (a slow controller): the
/// launch runs off the pipeline actor, so `GET /status`, a stop and the watchdog's
/// ping are each answered meanwhile; the job sbatch returns is then cancelled, since
/// the pipeline was stopped before it existed. The figures are printed (on an idle
/// machine each is well under 100 ms); the bound is a fifth of sbatch's 5 s, so it
/// tells an actor that waited for sbatch from one that did not on a machine several
/// times slower or busier too.
#[test]
fn a_slow_sbatch_delays_neither_the_status_nor_a_stop_nor_the_watchdog() {
    const SLACK: Duration = Duration::from_millis(1000);
    const PING_PERIOD: Duration = Duration::from_millis(200);
    let mut env = Env::new(
        &["--total-steps", "100000", "--step-ms", "10"],
        "launch:\n  backend: slurm\n  slurm:\n    poll_interval_s: 1\n",
        "[train]",
    );
    let shims = env.dir.path().join("slurm-shims");
    std::fs::create_dir_all(&shims).unwrap();
    let calls = env.dir.path().join("slurm-calls.txt");
    let log = |name: &str| format!("echo \"{name} $*\" >> '{}'\n", calls.display());
    write_executable(
        &shims.join("sbatch"),
        &format!(
            "#!/bin/sh\n{}sleep 5\n{}echo 4242\n",
            log("sbatch"),
            log("sbatch-returned")
        ),
    );
    write_executable(
        &shims.join("scancel"),
        &format!("#!/bin/sh\n{}", log("scancel")),
    );
    for name in ["scontrol", "sacct"] {
        write_executable(
            &shims.join(name),
            &format!("#!/bin/sh\n{}exit 1\n", log(name)),
        );
    }
    let path = format!(
        "{}:{}",
        shims.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    env.env.push(("PATH".into(), path));
    let called = |what: &str| {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with(what))
    };

    let (notify, _daemon) = serve_under_systemd(&env, "400000");
    let mut start = env
        .cmd()
        .arg("start")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "sbatch to be called", || {
        called("sbatch ")
    });
    let blocked_from = Instant::now();

    let addr = env.addr();
    let mut slowest_status = Duration::ZERO;
    for _ in 0..5 {
        let t = Instant::now();
        let r = http::get(&addr, "/status");
        slowest_status = slowest_status.max(t.elapsed());
        assert_eq!(r.status, 200, "{}", r.body);
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = Instant::now();
    let stop = env
        .uds("POST", "/pipeline/stop", Some("{}"))
        .expect("the socket answers");
    let stop_took = t.elapsed();
    // A few more pings, still within the blocked sbatch.
    let pings_at_stop = notify.count("WATCHDOG");
    wait_until(Duration::from_secs(5), "pings after the stop", || {
        notify.count("WATCHDOG") >= pings_at_stop + 2
    });
    let window_end = Instant::now();
    assert!(
        !called("sbatch-returned"),
        "everything above ran while sbatch was blocked"
    );

    assert_eq!(stop.status, 200, "{}", stop.body);
    let report = stop.json();
    assert!(
        report["message"]
            .as_str()
            .unwrap_or_default()
            .contains("being launched"),
        "{report:#}"
    );
    let pings: Vec<Instant> = notify
        .values("WATCHDOG")
        .into_iter()
        .map(|(at, _)| at)
        .collect();
    let first = pings
        .iter()
        .rposition(|at| *at <= blocked_from)
        .expect("a ping before sbatch was called");
    let last = pings
        .iter()
        .position(|at| *at >= window_end)
        .unwrap_or(pings.len() - 1);
    let longest_gap = pings[first..=last]
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
        .max(window_end.saturating_duration_since(pings[last]));
    eprintln!(
        "while sbatch was blocked: GET /status at most {slowest_status:?}, the stop {stop_took:?}, \
         the longest gap between pings {longest_gap:?} (every {PING_PERIOD:?})"
    );
    assert!(
        slowest_status <= SLACK,
        "GET /status took {slowest_status:?}"
    );
    assert!(stop_took <= SLACK, "the stop took {stop_took:?}");
    assert!(
        longest_gap <= PING_PERIOD + SLACK,
        "pings {:?} apart",
        longest_gap
    );

    // sbatch returns: the job it submitted is cancelled; the pipeline stays stopped.
    wait_until(
        Duration::from_secs(15),
        "the submitted job cancelled",
        || {
            std::fs::read_to_string(&calls)
                .unwrap_or_default()
                .lines()
                .any(|l| l.starts_with("scancel") && l.contains("4242"))
        },
    );
    assert_eq!(env.status()["pipeline"]["state"], "stopped");
    assert_eq!(env.pipeline_json()["worker"], serde_json::Value::Null);
    wait_until(Duration::from_secs(10), "lavenderd start to return", || {
        start.try_wait().unwrap().is_some()
    });
}

unsafe extern "C" {
    fn mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
}

/// `systemctl restart lavenderd` mid-run, as the manager does it: SIGTERM (the
/// daemon says STOPPING=1, the worker saves, exit 0), then a new `serve` with the
/// manager's variables: READY=1, and the run resumes by itself and finishes. No
/// `start` is typed after the restart.
#[test]
fn a_service_restart_mid_run_ends_in_a_finished_run() {
    let env = Env::new(
        &[
            "--total-steps",
            "60",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "10",
        ],
        "",
        "[train]",
    );
    let (notify, mut daemon) = serve_under_systemd(&env, "400000");
    env.start(&[]);
    env.wait_step(10, Duration::from_secs(10));
    send_signal(daemon.child.id() as i32, 15);
    let exit = daemon.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(notify.count("STOPPING") > 0, "{:?}", notify.all());
    assert_eq!(env.pipeline_json()["stop_cause"], "daemon_exit");

    std::fs::remove_file(&notify.path).unwrap();
    let (_notify, _daemon) = serve_under_systemd(&env, "400000");
    let st = env.wait_state("finished", Duration::from_secs(30));
    assert_eq!(
        st["pipeline"]["recovery"]["reason"], "daemon_exit",
        "{st:#}"
    );
    assert_eq!(env.train_calls().len(), 2);
}
