//! What README.md and docs/ show in a shell block runs. Every shell block (```sh) is
//! run as written by the test [`runner`] names for it, or carries `<!-- not run:
//! reason -->` on the line before it; a fenced block without an info string is refused
//! (`sh` for what a user types, `text` for output and layouts), so no command hides
//! from this list. The blocks of the documents no other test drives run here: each
//! command line from the repository root, where the docs type them, with `lavenderd`
//! on PATH and only what a user could set too (a scratch `LAVENDER_DATA_ROOT`, a port
//! of its own through `LAVENDER__SUPERVISOR__LISTEN`); a `lavenderd start` runs its
//! pipeline to the end, then `lavenderd daemon stop` ends the daemon.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lavender_testkit::doc_blocks::{Block, repository_blocks};
use lavender_testkit::python::say;
use lavender_testkit::*;
use serde_json::Value;

const HERE: &str = "daemon/tests/it/doc_commands.rs";
/// A documented example trains its 300 steps in about ten seconds; slow CI gets more.
const SLOW: Duration = Duration::from_secs(300);

/// The test that runs `block` as written, if one does.
fn runner(block: &Block) -> Option<&'static str> {
    match (block.doc.as_str(), block.info.as_str()) {
        // operations_doc.rs runs every ```sh block of the guide, in order.
        ("docs/OPERATIONS.md", "sh") => Some(
            "daemon/tests/it/operations_doc.rs (every block in order, a live daemon, \
             stand-ins for the service managers)",
        ),
        // readme_commands.rs runs the "Using it" block, line by line.
        ("README.md", "sh") if block.section == "Using it" => Some(
            "worker/tests/it/readme_commands.rs (installed binaries, in order, no data \
             root named)",
        ),
        ("docs/PYTHON.md" | "docs/ATTRIBUTION.md", _) => Some(HERE),
        _ => None,
    }
}

/// Every shell block is run or marked with a reason; every fenced block says what it
/// is. Prints the list (run with --nocapture to see it).
#[test]
fn every_shell_block_of_the_readme_and_the_docs_is_run_or_marked() {
    let mut wrong = Vec::new();
    for b in repository_blocks() {
        if b.info.is_empty() {
            wrong.push(format!(
                "{}: a fenced block without an info string; write ```sh for commands a user \
                 types (then run them or mark them), ```text for output or a layout",
                b.place()
            ));
            continue;
        }
        if !b.is_shell() {
            continue;
        }
        match (&b.not_run, runner(&b)) {
            (Some(reason), None) if !reason.is_empty() => {
                say(format!("{}: not run: {reason}", b.place()))
            }
            (Some(_), Some(r)) => wrong.push(format!(
                "{}: marked not run, but {r} runs it; drop the marker",
                b.place()
            )),
            (Some(_), None) => wrong.push(format!(
                "{}: `<!-- not run: -->` without a reason; say why it cannot run here",
                b.place()
            )),
            (None, Some(r)) => say(format!("{}: run by {r}", b.place())),
            (None, None) => wrong.push(format!(
                "{}: a shell block neither run nor marked; run it in {HERE} or put \
                 `<!-- not run: reason -->` on the line before it",
                b.place()
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The folder of the `lavenderd` (and `lavender-worker`) this build made.
fn bin_dir() -> PathBuf {
    lavenderd().parent().unwrap().to_path_buf()
}

/// `bash -c line` from the repository root, as a user with the build on PATH whose
/// data root is `data_root`.
fn user_shell(line: &str, data_root: &Path) -> Command {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(line)
        .current_dir(repo())
        .env("PATH", path)
        .env("LAVENDER_DATA_ROOT", data_root)
        .env("LAVENDER__SUPERVISOR__LISTEN", "127.0.0.1:0")
        .env_remove("LAVENDER_CONFIG")
        .env_remove("LAVENDER_SCALE")
        .env_remove("LAVENDER_CHUNK")
        .stdin(Stdio::null());
    c
}

fn run(line: &str, data_root: &Path) -> Output {
    user_shell(line, data_root).output().unwrap()
}

/// Ends the daemon a block started, also when the test fails.
struct StopDaemon<'a>(&'a Path);

impl Drop for StopDaemon<'_> {
    fn drop(&mut self) {
        run("lavenderd daemon stop", self.0);
    }
}

#[test]
fn the_blocks_no_other_test_drives_run_as_written() {
    let blocks: Vec<Block> = repository_blocks()
        .into_iter()
        .filter(|b| b.is_shell() && b.not_run.is_none() && runner(b) == Some(HERE))
        .collect();
    assert!(!blocks.is_empty(), "no block to run: {HERE} ran nothing");
    for b in &blocks {
        for line in b.body.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let scratch = tempfile::tempdir().unwrap();
            let data_root = scratch.path().join("data");
            let _stop = StopDaemon(&data_root);
            let out = run(line, &data_root);
            let said = format!("stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
            assert!(
                out.status.success(),
                "{}: `{line}` failed ({:?})\n{said}",
                b.place(),
                out.status
            );
            if line.starts_with("lavenderd start") {
                let st = wait_finished(&data_root, b, line);
                let runs = run("lavenderd runs --json", &data_root);
                let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
                assert!(
                    runs.as_array()
                        .is_some_and(|r| r.iter().any(|r| r["checkpoints"].as_u64() > Some(0))),
                    "{}: `{line}` finished without a checkpoint: {runs:#}\n{st:#}",
                    b.place()
                );
                say(format!(
                    "{}: `{line}` finished at step {} ({})",
                    b.place(),
                    st["training"]["step"],
                    stdout(&out).lines().next().unwrap_or_default()
                ));
            } else {
                say(format!("{}: `{line}` exited 0", b.place()));
            }
        }
    }
}

/// The status once the pipeline `start` began has finished; fails on a pipeline that
/// stopped or failed instead.
fn wait_finished(data_root: &Path, b: &Block, line: &str) -> Value {
    let mut st = Value::Null;
    wait_until(SLOW, &format!("`{line}` to finish"), || {
        let out = run("lavenderd status --json", data_root);
        st = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let state = st["pipeline"]["state"].as_str().unwrap_or("");
        assert!(
            !["failed", "stopped"].contains(&state),
            "{}: `{line}` ended {state}: {st:#}\nlog: {}",
            b.place(),
            std::fs::read_to_string(data_root.join("state/lavenderd.log")).unwrap_or_default()
        );
        state == "finished"
    });
    st
}

/// README.md's layout names every workspace member's folder and every folder the
/// repository tracks at its top.
#[test]
fn the_readme_layout_names_every_package_and_top_level_folder() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let layout = lavender_testkit::doc_blocks::blocks("README.md", &readme)
        .into_iter()
        .find(|b| b.section == "Layout")
        .expect("README.md has a ```text block under ## Layout");
    let named: Vec<&str> = layout
        .body
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let cargo = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let members = cargo
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("Cargo.toml's workspace members");
    let mut wanted: Vec<String> = members
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|m| *m != ".")
        .map(|m| format!("{}/", m.split('/').next().unwrap()))
        .collect();
    let tracked = Command::new("git")
        .args(["ls-files"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        tracked.status.success(),
        "git ls-files: {}",
        stderr(&tracked)
    );
    wanted.extend(
        stdout(&tracked)
            .lines()
            .filter_map(|p| p.split_once('/').map(|(top, _)| format!("{top}/")))
            .filter(|top| !top.starts_with('.')),
    );
    wanted.sort();
    wanted.dedup();
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|w| !named.contains(&w.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "README.md's layout does not name {missing:?} (it names {named:?})"
    );
}
