//! Which data root a command reads: every command says it first (and `--json` as a
//! field, or on stderr where its JSON is an array); `data_root_candidates` picks the
//! first that holds a data root, and one that disappears under a running daemon (the
//! disk unplugged) ends that daemon with an error naming it, never a switch to another
//! folder; a `start` with nothing to do says so in one line and does nothing else; a
//! `start` the daemon refuses leaves no daemon behind that it started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use lavender_testkit::notify::Recorder;
use lavender_testkit::*;
use serde_json::Value;

/// The first line every command prints for the data root `--data-root` names.
fn flag_line(root: &Path) -> String {
    format!("data root: {} (--data-root)", root.display())
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[test]
fn every_command_that_reads_a_data_root_says_which_first() {
    let mut env = Env::new(
        &[
            "--total-steps",
            "12",
            "--step-ms",
            "5",
            "--checkpoint-every",
            "4",
        ],
        "",
        "[train]",
    );
    env.serve();
    let line = flag_line(&env.data_root);
    let out = env.start(&[]);
    assert_eq!(first_line(&stdout(&out)), line, "{}", stdout(&out));
    env.wait_state("finished", Duration::from_secs(20));

    for args in [
        &["status"][..],
        &["logs", "-n", "2"],
        &["runs"],
        &["checkpoints"],
        &["export"],
        &["prune", "--keep-runs", "5", "--yes"],
        &["stop"],
    ] {
        let out = env.run(args);
        assert_eq!(
            first_line(&stdout(&out)),
            line,
            "lavenderd {args:?}\nstdout: {}\nstderr: {}",
            stdout(&out),
            stderr(&out)
        );
    }
    // `--json`: status and export carry it as a field, beside the contract.
    let out = env.run(&["status", "--json"]);
    let st: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_valid(&st);
    assert_eq!(
        st["data_root"]["path"],
        env.data_root.display().to_string(),
        "{st:#}"
    );
    assert_eq!(st["data_root"]["chosen_by"], "flag", "{st:#}");
    // An array cannot take a field: the line goes to stderr, the array stays whole.
    let out = env.run(&["runs", "--json"]);
    let runs: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(runs.is_array(), "{runs}");
    assert_eq!(first_line(&stderr(&out)), line, "{}", stderr(&out));

    // The daemon commands say it too, on the daemon they find there.
    let out = env.run(&["daemon", "stop"]);
    assert_eq!(first_line(&stdout(&out)), line, "{}", stdout(&out));
    env.kill_daemons();
}

/// `lavenderd ARGS` with the config `config`, no `--data-root` and no
/// `LAVENDER_DATA_ROOT`, from `cwd`, with `home` as HOME.
fn bare(config: &Path, cwd: &Path, home: &Path) -> Command {
    let mut c = Command::new(lavenderd());
    c.arg("--config")
        .arg(config)
        .current_dir(cwd)
        .env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("LAVENDER_DATA_ROOT")
        .env_remove("LAVENDER_CONFIG")
        .stdin(Stdio::null());
    c
}

fn run(mut c: Command) -> Output {
    c.output().unwrap()
}

/// A `serve` daemon, killed (with its worker's group) when dropped.
struct Serving {
    child: Child,
    worker: Option<i32>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pid) = self.worker.filter(|p| alive(*p)) {
            send_signal(pid, 9);
        }
    }
}

#[test]
fn the_first_candidate_holding_a_data_root_wins_and_an_unplugged_one_stops_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let (home, cwd) = (dir.path().join("home"), dir.path().join("cwd"));
    let (empty, ssd, other) = (
        dir.path().join("empty-disk"),
        dir.path().join("ssd"),
        dir.path().join("other"),
    );
    for d in [&home, &cwd, &empty, &ssd, &other] {
        std::fs::create_dir_all(d).unwrap();
    }
    // `ssd` holds a data root from an earlier run; `other` holds one too, later in the list.
    std::fs::create_dir_all(ssd.join("checkpoints/run-2026-01-01_00-00-00")).unwrap();
    std::fs::create_dir_all(other.join("checkpoints/run-2026-01-02_00-00-00")).unwrap();
    let missing = dir.path().join("not-plugged-in");
    let config = dir.path().join("lavender.yaml");
    let worker = lavenderd().with_file_name("lavender-fake-worker");
    let quoted = |items: &[String]| {
        items
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let command = [worker.display().to_string()]
        .into_iter()
        .chain(["--total-steps", "100000", "--step-ms", "20"].map(String::from))
        .collect::<Vec<_>>();
    let candidates = [&missing, &empty, &ssd, &other].map(|p| p.display().to_string());
    std::fs::write(
        &config,
        format!(
            "steps: [train]\nworker:\n  command: [{}]\nsupervisor:\n  listen: 127.0.0.1:0\n  poll_interval_ms: 50\n  stop_timeout_s: 10\nnotify:\n  desktop: false\ndata_root_candidates: [{}]\n",
            quoted(&command),
            quoted(&candidates),
        ),
    )
    .unwrap();

    // The first that holds a data root wins over an empty disk before it; the one not
    // plugged in is named.
    let mut status = bare(&config, &cwd, &home);
    status.arg("status");
    let out = run(status);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = first_line(&stdout(&out)).to_string();
    assert_eq!(
        first,
        format!(
            "data root: {} (data_root_candidates[2], the first that holds a data root; not there: {})",
            ssd.display(),
            missing.display()
        )
    );

    // A daemon serving it, training.
    let log = dir.path().join("serve.log");
    let mut serve = bare(&config, &cwd, &home);
    serve
        .arg("serve")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("serve.err")).unwrap());
    let mut serving = Serving {
        child: serve.spawn().unwrap(),
        worker: None,
    };
    let socket = ssd.join("state/lavenderd.sock");
    wait_until(Duration::from_secs(10), "the daemon to listen", || {
        http::uds(&socket, "GET", "/healthz", None).is_some()
    });
    let mut start = bare(&config, &cwd, &home);
    start.arg("start");
    let out = run(start);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert!(
        first_line(&stdout(&out)).contains(&ssd.display().to_string()),
        "{}",
        stdout(&out)
    );
    let status_of = || {
        http::uds(&socket, "GET", "/status", None)
            .map(|r| r.json())
            .unwrap_or(Value::Null)
    };
    wait_until(Duration::from_secs(20), "training", || {
        status_of()["training"]["step"].as_u64() >= Some(2)
    });
    let worker_pid = status_of()["pipeline"]["pid"].as_i64().unwrap() as i32;
    serving.worker = Some(worker_pid);

    // The disk goes: its path no longer leads to the data root. A rename does it
    // at once (an rm -r would race the worker's writes), as an unmount does.
    std::fs::rename(&ssd, dir.path().join("ssd-unplugged")).unwrap();
    let mut exit = None;
    wait_until(Duration::from_secs(30), "the daemon to stop", || {
        exit = serving.child.try_wait().unwrap();
        exit.is_some()
    });
    let exit = exit.unwrap();
    let said = format!(
        "{}{}",
        std::fs::read_to_string(&log).unwrap_or_default(),
        std::fs::read_to_string(dir.path().join("serve.err")).unwrap_or_default()
    );
    assert!(
        !exit.success(),
        "an unplugged data root is an error: {said}"
    );
    assert!(
        said.contains(&format!(
            "the data root {} (data_root_candidates[2], the first that holds a data root; not there: {}) is gone",
            ssd.display(),
            missing.display()
        )),
        "the error names the folder and how it was chosen: {said}"
    );
    assert!(!ssd.exists(), "nothing made the unplugged path again");
    wait_until(Duration::from_secs(10), "the worker to be killed", || {
        !alive(worker_pid)
    });
    // Nothing carried on elsewhere: the other candidates got nothing.
    let entries = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect()
    };
    assert_eq!(entries(&empty), Vec::<PathBuf>::new());
    assert_eq!(entries(&other), vec![other.join("checkpoints")]);
    // A later lookup names the candidate that is gone as well as the one it reads.
    let mut status = bare(&config, &cwd, &home);
    status.arg("status");
    let out = run(status);
    let first = first_line(&stdout(&out)).to_string();
    assert!(
        first.starts_with(&format!(
            "data root: {} (data_root_candidates[3]",
            other.display()
        )) && first.contains(&format!(
            "not there: {}, {}",
            missing.display(),
            ssd.display()
        )),
        "{first}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_with_nothing_to_do_says_so_in_one_line_and_does_nothing_else() {
    let hook = Recorder::start().await;
    let mut env = Env::new(
        &[
            "--total-steps",
            "8",
            "--step-ms",
            "5",
            "--checkpoint-every",
            "4",
        ],
        &format!("  keep_runs: 1\n{}", hook.webhook_yaml("")),
        "[train]",
    );
    env.serve();
    env.start(&[]);
    env.wait_state("finished", Duration::from_secs(20));
    wait_until(Duration::from_secs(10), "the finished push", || {
        hook.of_kind("finished").len() == 1
    });
    // The finished run's own prune (keep_runs) is done, with nothing to remove: an
    // old run made before that line would be its to take.
    env.log_with("keep_runs 1: no old run to remove", Duration::from_secs(10));
    // An older run a prune would take (keep_runs: 1).
    let old = env
        .data_root
        .join("checkpoints/run-2020-01-01_00-00-00/pretrain-00-00-00-0001");
    std::fs::create_dir_all(&old).unwrap();
    let before = env.pipeline_json_raw();
    let line = flag_line(&env.data_root);

    // Through the running daemon, then with none: two lines, the data root's and this.
    let expect = |out: &Output| {
        assert!(out.status.success(), "{}", stderr(out));
        let text = stdout(out);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], line);
        assert!(
            lines[1].starts_with("nothing to do: chunk 1 at scale tiny has finished every step")
                && lines[1].contains("lavenderd start --force"),
            "{text}"
        );
    };
    expect(&env.run(&["start", "--resume", "latest"]));
    assert_eq!(env.pipeline_json_raw(), before, "the record is untouched");
    assert!(old.is_dir(), "no prune");
    let out = env.run(&["daemon", "stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let addr = env.state_dir().join("lavenderd.addr");
    assert!(!addr.exists());
    let out = env.run(&["start", "--foreground"]);
    expect(&out);
    assert_eq!(stderr(&out), "", "nothing else is said");
    assert!(!addr.exists(), "no daemon was started");
    assert_eq!(env.pipeline_json_raw(), before, "the record is untouched");

    // A start that does run something is the barrier: its "finished" push follows
    // any the starts above would have sent, and its prune sees both older runs.
    env.kill_daemons();
    env.serve();
    env.start(&["--force"]);
    env.wait_state("finished", Duration::from_secs(20));
    wait_until(
        Duration::from_secs(30),
        "the forced run's finished push",
        || hook.of_kind("finished").len() >= 2,
    );
    // The prune removes the runs, then logs it: its log line is the event.
    let prune_lines = || -> Vec<String> {
        std::fs::read_to_string(env.daemon_log())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("keep_runs 1: removed"))
            .map(str::to_string)
            .collect()
    };
    wait_until(Duration::from_secs(30), "the forced run's prune", || {
        !old.exists() && !prune_lines().is_empty()
    });
    assert_eq!(
        hook.of_kind("finished").len(),
        2,
        "pushes: {:?}",
        hook.kinds()
    );
    let prunes = prune_lines();
    assert_eq!(prunes.len(), 1, "{prunes:?}");
    assert!(prunes[0].contains("removed 2 old run(s)"), "{prunes:?}");
}

/// `lavenderd daemon stop` on `config`'s data root, so a daemon a failed assert left
/// behind does not outlive the test.
struct StopsDaemon<'a>(&'a Path);

impl Drop for StopsDaemon<'_> {
    fn drop(&mut self) {
        let _ = Command::new(lavenderd())
            .arg("--config")
            .arg(self.0)
            .args(["daemon", "stop"])
            .stdin(Stdio::null())
            .output();
    }
}

#[test]
fn a_start_the_daemon_refuses_stops_the_daemon_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lavender.yaml");
    let root = dir.path().join("data");
    std::fs::write(
        &config,
        format!(
            "data_root: {}\nsteps: [train]\nworker:\n  command: [./missing/python, train.py]\nsupervisor:\n  listen: 127.0.0.1:0\n",
            root.display()
        ),
    )
    .unwrap();
    let _guard = StopsDaemon(&config);
    let lavenderd_at = |args: &[&str]| {
        Command::new(lavenderd())
            .arg("--config")
            .arg(&config)
            .args(args)
            .env_remove("LAVENDER_DATA_ROOT")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = lavenderd_at(&["start"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    // The refusal names the path; the daemon the start spawned for it is gone again.
    assert!(err.contains("worker.command[0]"), "{err}");
    assert!(err.contains("missing/python does not exist"), "{err}");
    assert!(err.contains("stopped the background daemon"), "{err}");
    let stop = lavenderd_at(&["daemon", "stop"]);
    assert_eq!(stop.status.code(), Some(4), "{}", stdout(&stop));
    assert!(
        stdout(&stop).contains("no lavenderd is running"),
        "{}",
        stdout(&stop)
    );
}
