//! Interrupted and failing steps: a SIGKILL half-way or a full disk leaves no output a
//! later step could take for complete, keeps earlier outputs, and a rerun succeeds. Also
//! the plain progress lines a step prints when its output is not a terminal.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use lavender_testkit::data_steps::{Root, docs, path_config};

/// A corpus of `n` distinct speeches, about 60 bytes each.
fn big_corpus(root: &Root, n: usize) -> PathBuf {
    let src = root.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let text: String = (0..n)
        .map(|i| {
            format!(
                "Speaker {}:\nThis is speech number {i}, and it has words.\n\n",
                i % 9
            )
        })
        .collect();
    std::fs::write(src.join("corpus.txt"), text).unwrap();
    src
}

/// The staging directory a running step builds its output in, once it exists.
fn staging(parent: &Path, name: &str) -> Option<PathBuf> {
    std::fs::read_dir(parent)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            !n.starts_with(".tmp-old-")
                && lavender::atomic::staged_leftover(&n).is_some_and(|(t, _)| t == name)
        })
}

/// Start `step`, wait until `ready(staging dir)` says it is half-way, SIGKILL it.
fn kill_half_way(
    root: &Root,
    step: &str,
    parent: &Path,
    name: &str,
    ready: impl Fn(&Path) -> bool,
) {
    let mut child = root
        .cmd(step, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if staging(parent, name).is_some_and(|dir| ready(&dir)) {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "{step} finished before it could be killed"
        );
        assert!(Instant::now() < deadline, "{step} never got half-way");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

#[test]
fn sigkilled_dedup_keeps_the_previous_output_and_a_rerun_succeeds() {
    let root = Root::new();
    let src = big_corpus(&root, 250_000);
    root.config(&path_config(&src, ""));
    root.ok("downloads", &[]);
    root.ok("dedup", &[]);
    let before = root.manifest("corpus/dedup");
    let before_docs = std::fs::read(root.data().join("corpus/dedup/documents.jsonl")).unwrap();

    // A config change makes dedup rerun; kill it once it has written part of its output.
    root.config(&path_config(&src, "  dedup: {paragraphs: true}\n"));
    let corpus = root.data().join("corpus");
    kill_half_way(&root, "dedup", &corpus, "dedup", |dir| {
        std::fs::metadata(dir.join("documents.jsonl")).is_ok_and(|m| m.len() > 0)
    });
    assert!(
        staging(&corpus, "dedup").is_some(),
        "the killed run's staging is left"
    );
    assert_eq!(
        root.manifest("corpus/dedup"),
        before,
        "the old manifest still describes the old output"
    );
    assert_eq!(
        std::fs::read(root.data().join("corpus/dedup/documents.jsonl")).unwrap(),
        before_docs
    );

    let err = root.ok("dedup", &[]);
    assert!(!err.contains("up to date"), "{err}");
    assert!(staging(&corpus, "dedup").is_none(), "the rerun cleans up");
    assert_ne!(
        root.manifest("corpus/dedup")["config_hash"],
        before["config_hash"]
    );
}

#[test]
fn sigkilled_precompute_leaves_no_tokens_that_look_complete() {
    let root = Root::new();
    for step in ["downloads", "dedup", "filter", "build_shards"] {
        root.ok(step, &[]);
    }
    let data = root.data();
    // Half-way: the tokenizer is trained, the arrays are being written.
    kill_half_way(&root, "precompute", &data, "tokens", |dir| {
        dir.join("tokenizer.json").exists()
    });
    assert!(
        !data.join("tokens").exists(),
        "no tokens/ directory before a precompute completes"
    );
    assert!(!root.has_manifest("tokens"));

    root.ok("precompute", &[]);
    assert!(root.has_manifest("tokens"));
    assert!(staging(&data, "tokens").is_none());
    assert!(data.join("tokens/index.json").exists());
}

#[test]
fn a_full_disk_fails_with_the_path_and_keeps_earlier_outputs() {
    let root = Root::new();
    let src = big_corpus(&root, 40_000);
    root.config(&path_config(&src, ""));
    for step in ["downloads", "dedup", "filter"] {
        root.ok(step, &[]);
    }
    let before = root.manifest("corpus/filtered");
    let before_docs = docs(&root.data().join("corpus/filtered/documents.jsonl"));

    // RLIMIT_FSIZE makes writes past 256 KiB fail the way a full disk does (the worker sees
    // an I/O error on write); SIGXFSZ is ignored so the error reaches the worker.
    let mut cmd = root.cmd("filter", &["--force"]);
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 256 << 10,
                rlim_max: 256 << 10,
            };
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("documents.jsonl") && err.contains("could not write"),
        "{err}"
    );
    assert_eq!(root.manifest("corpus/filtered"), before);
    assert_eq!(
        docs(&root.data().join("corpus/filtered/documents.jsonl")),
        before_docs
    );
    assert!(
        staging(&root.data().join("corpus"), "filtered").is_none(),
        "a failed run removes its staging"
    );

    // The step after it still runs on the intact output.
    root.ok("build_shards", &[]);
    assert_eq!(root.count("shards", "documents"), before_docs.len() as u64);
}

#[test]
fn failures_are_recorded_as_failed_events_of_the_run_with_their_kind() {
    let root = Root::new();
    let run = root.run_dir();
    let err = root.fails("dedup", &["--run-dir", run.to_str().unwrap()]);
    let events = root.events();
    assert_eq!(events.len(), 1, "{err}");
    assert_eq!(events[0]["kind"], "failed");
    assert_eq!(events[0]["step"], "dedup");
    let failure = &events[0]["failure"];
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("run `lavender-worker downloads` first"),
        "{failure}"
    );
    assert!(failure["kind"].is_string(), "{failure}");
}

#[test]
fn progress_is_printed_as_plain_lines_when_not_a_terminal() {
    let root = Root::new();
    let src = big_corpus(&root, 100_000);
    root.config(&path_config(&src, ""));
    root.ok("downloads", &[]);
    let out = root
        .cmd("dedup", &[])
        .env("LAVENDER_PROGRESS_INTERVAL_MS", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("dedup: ") && l.contains("% "))
        .unwrap_or_else(|| panic!("no progress line in:\n{err}"));
    // e.g. "dedup: 41% 41,234 docs, 12.3 MB/s, ETA 2s"
    let rest = line.strip_prefix("dedup: ").unwrap();
    let (pct, rest) = rest.split_once("% ").unwrap();
    assert!(pct.parse::<u32>().unwrap() <= 100, "{line}");
    assert!(rest.contains(" docs, ") && rest.contains(" MB/s"), "{line}");
    assert!(!err.contains('\u{1b}'), "no terminal escapes in a log");
}
