//! README.md's commands cannot rot. Both programs are installed with
//! `scripts/install.sh` (what `make install` runs) into a temporary PREFIX; in a
//! folder standing for the checkout, `make run`'s own command line trains the
//! pipeline (`lavenderd start --scale tiny --foreground`, no data root named; the
//! test's config makes the model and its stages small), then every command of the
//! README's "Using it" block runs, in order, from the same folder, with only
//! PREFIX/bin and the system folders on PATH and no data root named either: each
//! must find that run, say on its first line where it looked, and do what its
//! comment says. Then from another folder, and from one holding an empty
//! `data-root/`, which must point at the run and the flag. Beside that: the installed
//! lavenderd run by its path finds the worker beside itself, the error without any
//! worker names where it looked, `start --foreground` prints the event view only
//! (tracing goes to the daemon log), and uninstall removes exactly what install wrote.
//!
//! The binaries are the ones `cargo test --workspace` built beside this package's
//! worker (for this package alone, `cargo build -p lavenderd` first).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lavender_testkit::{WORDS, lavenderd, repo, stderr, stdout, wait_until, write_speeches};
use serde_json::Value;

const README: &str = include_str!("../../../README.md");
const MAKEFILE: &str = include_str!("../../../Makefile");
const T: Duration = Duration::from_secs(90);
/// Where the system's own tools (bash, curl, jq, ldd) live; nothing of lavender's.
const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The folder holding this build's `lavenderd` and `lavender-worker`.
fn build_dir() -> PathBuf {
    lavenderd().parent().unwrap().to_path_buf()
}

fn install(prefix: &Path) -> Output {
    Command::new("bash")
        .arg(repo().join("scripts/install.sh"))
        .arg("install")
        .arg(prefix)
        .arg(build_dir())
        .env("PATH", SYSTEM_PATH)
        .output()
        .unwrap()
}

/// Every file and folder under `dir`, relative to it.
fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out
}

/// The README's pipeline, made small: its default worker command (found through
/// PATH), a one-layer model, short stages; `listen` on a port of the test's.
fn write_config(path: &Path, corpus: &Path, steps: &str, listen: &str) {
    let yaml = format!(
        r#"steps: {steps}
device: cpu
threads: 1
data:
  sources:
    - path: "{corpus}"
  shards: {{shard_bytes: 2000, validation_fraction: 0.1}}
  tokenizer: {{vocab_size: 320, min_frequency: 2}}
  hard_examples: {{top_k: 8, upsample: 1}}
model: {{n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, dropout: 0.0, layer_norm_epsilon: 1.0e-5}}
optimizer: {{warmup_steps: 2}}
training:
  batch_size: 4
  seq_len: 16
  log_every: 1
  eval_every: 50
  eval_batches: 1
  keep_checkpoints: 2
  stages:
    - {{name: pretrain, steps: 400, lr: 3.0e-3, checkpoint_every: 20}}
    - {{name: sft, steps: 4, lr: 1.0e-3, checkpoint_every: 1000}}
    - {{name: dpo, steps: 4, lr: 5.0e-4, checkpoint_every: 1000, beta: 0.1}}
supervisor:
  listen: {listen}
  poll_interval_ms: 50
  stop_timeout_s: 60
notify:
  desktop: false
"#,
        corpus = corpus.display(),
    );
    std::fs::write(path, yaml).unwrap();
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The command lines of the ```sh block after `heading`, comments stripped.
fn block_after(doc: &str, heading: &str) -> Vec<(String, String)> {
    let rest = &doc[doc
        .find(heading)
        .unwrap_or_else(|| panic!("README.md lost its {heading:?} section"))..];
    let start = rest.find("```sh\n").expect("a ```sh block") + "```sh\n".len();
    let end = start + rest[start..].find("```").expect("a closed block");
    rest[start..end]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.split_once(" #") {
            Some((cmd, comment)) => (cmd.trim().to_string(), comment.trim().to_string()),
            None => (l.trim().to_string(), String::new()),
        })
        .collect()
}

/// A shell in a folder, with PATH = PREFIX/bin + shims + the system.
#[derive(Clone)]
struct Shell {
    vars: Vec<(String, String)>,
    dir: PathBuf,
}

impl Shell {
    fn run(&self, line: &str, timeout: Option<u64>) -> Output {
        let script = match timeout {
            // `logs -f` follows for ever: the README means "watch it"; a few seconds do.
            Some(secs) => {
                format!("rc=0; timeout {secs} {line} || rc=$?; [ $rc = 124 ] || exit $rc")
            }
            None => line.to_string(),
        };
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .current_dir(&self.dir)
            .env_clear()
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// The same shell in another folder.
    fn in_dir(&self, dir: &Path) -> Shell {
        Shell {
            dir: dir.to_path_buf(),
            ..self.clone()
        }
    }

    fn status(&self) -> Value {
        let out = self.run("lavenderd status --json", None);
        let st: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if !st.is_null() {
            lavender_testkit::assert_valid(&st);
        }
        st
    }
}

fn ok(line: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "`{line}` failed ({:?})\nstdout: {}\nstderr: {}",
        out.status,
        stdout(out),
        stderr(out)
    );
    format!("{}{}", stdout(out), stderr(out))
}

/// The first line a command printed: the data root it read and how it was chosen,
/// which must be `root`, the per-user default (nothing names another).
fn says_root(line: &str, out: &Output, root: &Path) {
    // On stdout, or on stderr where stdout is a file's text (`service install`).
    let text = stdout(out);
    let first = [text.as_str(), stderr(out).as_str()]
        .into_iter()
        .map(|t| t.lines().next().unwrap_or_default().to_string())
        .find(|l| l.starts_with("data root: "))
        .unwrap_or_default();
    let first = first.as_str();
    assert!(
        first.starts_with(&format!(
            "data root: {} (the per-user default ~/.local/share/lavender",
            root.display()
        )),
        "`{line}` does not say first where it looked:\n{text}{}",
        stderr(out)
    );
}

#[test]
fn readme_using_it_commands_do_what_they_say_after_make_run_and_make_install() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    ok("scripts/install.sh install", &install(&prefix));
    let corpus = write_speeches(&dir.path().join("corpus"), &WORDS[..8]);
    let config = dir.path().join("lavender.yaml");
    let port = free_port();
    let steps = "[downloads, dedup, filter, build_shards, precompute, train]";
    write_config(&config, &corpus, steps, &format!("127.0.0.1:{port}"));
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (shim_dir, calls) = lavender_testkit::service_shims(dir.path());
    // No data root is named anywhere: the per-user one under HOME it is.
    let data_root = home.join(".local/share/lavender");
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(&checkout).unwrap();
    let sh = Shell {
        vars: vec![
            (
                "PATH".into(),
                format!(
                    "{}:{}:{SYSTEM_PATH}",
                    prefix.join("bin").display(),
                    shim_dir.display()
                ),
            ),
            ("HOME".into(), home.display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                home.join(".config").display().to_string(),
            ),
            ("LAVENDER_CONFIG".into(), config.display().to_string()),
        ],
        dir: checkout.clone(),
    };
    // The daemon `start` leaves in the background goes when the test ends, passed or not.
    let _daemon = DaemonGuard(data_root.join("state/lavenderd.pid"));
    let daemon_log = data_root.join("state/lavenderd.log");
    let show_log = || std::fs::read_to_string(&daemon_log).unwrap_or_default();
    let training = |sh: &Shell| {
        wait_until(T, "training with a checkpoint", || {
            let st = sh.status();
            assert_ne!(st["pipeline"]["state"], "failed", "{st:#}\n{}", show_log());
            st["active_step"] == "train"
                && st["training"]["step"].as_u64() >= Some(3)
                && st["training"]["checkpoints"].as_u64() >= Some(1)
        })
    };

    // `make run`, as the Makefile runs it, from the checkout.
    let make_run = "lavenderd start --scale tiny --foreground";
    assert!(
        MAKEFILE.contains("/lavenderd start --scale tiny --foreground $$resume"),
        "the Makefile's run target no longer runs `{make_run}`: update this test"
    );
    let out = sh.run(make_run, None);
    ok(make_run, &out);
    says_root(make_run, &out, &data_root);
    let st = sh.status();
    assert_eq!(
        st["pipeline"]["state"],
        "finished",
        "{st:#}\n{}",
        show_log()
    );
    assert!(
        st["training"]["checkpoints"].as_u64() >= Some(1),
        "make run saved a checkpoint: {st:#}"
    );

    let lines = block_after(README, "## Using it");
    let mut tested = Vec::new();
    let mut stopped_at: Option<String> = None;
    for (line, comment) in &lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["lavenderd", "start", "--scale", "small"] => {
                let out = sh.run(line, None);
                let text = ok(line, &out);
                says_root(line, &out, &data_root);
                assert!(text.contains("pipeline running"), "{comment}: {text}");
                assert!(
                    text.contains("scale small"),
                    "start names the scale: {text}"
                );
                training(&sh);
            }
            ["curl", "-s", url, "|", "jq", "."] => {
                assert_eq!(*url, "localhost:7070/status", "{line}");
                let ours = line.replace("7070", &port.to_string());
                let text = ok(&ours, &sh.run(&ours, None));
                let st: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("`{line}` printed no JSON ({e}): {text}"));
                lavender_testkit::assert_valid(&st);
                assert_eq!(st["pipeline"]["running"], true, "{st:#}");
            }
            ["lavenderd", "status"] => {
                let out = sh.run(line, None);
                let text = ok(line, &out);
                says_root(line, &out, &data_root);
                assert!(text.contains("running"), "{comment}: {text}");
                assert!(text.contains("train"), "{comment}: {text}");
            }
            ["lavenderd", "stop"] => {
                let out = sh.run(line, None);
                let text = ok(line, &out);
                says_root(line, &out, &data_root);
                let st = sh.status();
                assert_eq!(st["pipeline"]["state"], "stopped", "{st:#}");
                let latest = st["training"]["latest_checkpoint"]
                    .as_str()
                    .unwrap_or_else(|| panic!("no checkpoint after the stop: {st:#}"))
                    .to_string();
                assert!(
                    text.contains(&latest),
                    "stop prints the checkpoint it saved ({latest}): {text}"
                );
                stopped_at = Some(latest);
            }
            [
                "lavenderd",
                "start",
                "--scale",
                "small",
                "--resume",
                "latest",
            ] => {
                let out = sh.run(line, None);
                let text = ok(line, &out);
                says_root(line, &out, &data_root);
                let saved = stopped_at
                    .as_deref()
                    .expect("the README stops before it resumes");
                assert!(
                    text.contains("resuming from") && text.contains(saved),
                    "resumes from the stop's checkpoint {saved}: {text}"
                );
                wait_until(T, "the resumed pipeline to finish", || {
                    let st = sh.status();
                    assert_ne!(st["pipeline"]["state"], "failed", "{st:#}\n{}", show_log());
                    st["pipeline"]["state"] == "finished"
                });
            }
            ["lavenderd", "logs", "-f"] => {
                let out = sh.run(line, Some(3));
                let text = ok(line, &out);
                says_root(line, &out, &data_root);
                // The pipeline log's tail: the daemon's lines of the run (a start, the
                // saves, the end), each marked `lavenderd: `.
                assert!(text.contains("lavenderd: "), "the worker's log: {text}");
            }
            ["lavenderd", "export", "--all"] => {
                let out = sh.run(line, None);
                let text = ok(line, &out);
                says_root(line, &out, &data_root);
                let exported: Vec<PathBuf> = std::fs::read_dir(data_root.join("checkpoints"))
                    .unwrap()
                    .flatten()
                    .map(|run| run.path().join("exported"))
                    .filter(|e| e.is_dir())
                    .flat_map(|e| std::fs::read_dir(e).unwrap().flatten().map(|c| c.path()))
                    .collect();
                assert!(
                    exported.iter().any(|c| c
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("checkpoint-"))
                        && c.join("config.json").is_file()
                        && c.join("model.safetensors").is_file()),
                    "{comment}: {exported:?}\n{text}"
                );
            }
            ["lavenderd", "daemon", "stop"] => {
                let pid_file = data_root.join("state/lavenderd.pid");
                let pid: i32 = std::fs::read_to_string(&pid_file)
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                let out = sh.run(line, None);
                let text = ok(line, &out);
                says_root(line, &out, &data_root);
                assert!(text.contains("lavenderd stopped"), "{comment}: {text}");
                assert!(!lavender_testkit::alive(pid), "{comment}: pid {pid} lives");
            }
            ["lavenderd", "service", "install", "--user"] => {
                let out = sh.run(line, None);
                let text = ok(line, &out);
                says_root(line, &out, &data_root);
                let unit = home.join(".config/systemd/user/lavenderd.service");
                let unit_text = std::fs::read_to_string(&unit)
                    .unwrap_or_else(|e| panic!("{comment}: no {} ({e}): {text}", unit.display()));
                let installed = prefix.join("bin/lavenderd");
                assert!(
                    unit_text.contains(&installed.display().to_string()),
                    "the unit runs the installed lavenderd: {unit_text}"
                );
                let calls = std::fs::read_to_string(&calls).unwrap_or_default();
                assert!(calls.contains("systemctl"), "{calls}");
            }
            _ => panic!(
                "README.md's \"Using it\" shows `{line}`, which this test does not run: \
                 add it here with what it must do"
            ),
        }
        tested.push(line.clone());
    }
    assert!(tested.len() >= 9, "the block lost commands: {tested:?}");
    let _ = sh.run("lavenderd stop", None);

    // From another folder: the same data root, found the same way, with the run.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let there = sh.in_dir(&elsewhere);
    let line = "lavenderd status";
    let out = there.run(line, None);
    let text = ok(line, &out);
    says_root(line, &out, &data_root);
    assert!(text.contains("finished"), "{text}");
    let line = "lavenderd logs";
    let out = there.run(line, None);
    let text = ok(line, &out);
    says_root(line, &out, &data_root);
    assert!(text.contains("lavenderd: "), "{text}");
    let line = "lavenderd export --all";
    let out = there.run(line, None);
    let text = ok(line, &out);
    says_root(line, &out, &data_root);
    assert!(
        text.contains("up to date"),
        "exported above already: {text}"
    );
    assert!(
        there.status()["training"]["checkpoints"].as_u64() >= Some(1),
        "{text}"
    );

    // From a folder holding an empty data-root/ (which wins there): it says the run
    // is elsewhere, and the flag that reads it.
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("data-root")).unwrap();
    let out = sh.in_dir(&project).run("lavenderd status", None);
    let text = ok("lavenderd status", &out);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            format!(
                "data root: {} (the data-root/ folder here)",
                project.join("data-root").display()
            )
            .as_str()
        ),
        "{text}"
    );
    let hint = lines.next().unwrap_or_default();
    assert!(
        hint.contains(&format!("--data-root {}", data_root.display()))
            && hint.contains("per-user default"),
        "{text}"
    );
}

/// SIGTERM to the daemon whose pid file this names, on drop.
struct DaemonGuard(PathBuf);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            lavender_testkit::send_signal(pid, 15);
        }
    }
}

#[test]
fn installed_lavenderd_run_by_its_path_finds_the_worker_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let before = tree(dir.path());
    let text = ok("scripts/install.sh install", &install(&prefix));
    assert!(text.contains("is not on PATH"), "{text}");
    let corpus = write_speeches(&dir.path().join("corpus"), &WORDS[..8]);
    let config = dir.path().join("lavender.yaml");
    write_config(
        &config,
        &corpus,
        "[downloads, dedup, filter]",
        "127.0.0.1:0",
    );
    let data_root = dir.path().join("data");
    // Neither lavenderd nor the worker is on PATH: lavenderd is run by its path.
    let out = Command::new(prefix.join("bin/lavenderd"))
        .args(["--config", config.to_str().unwrap()])
        .args(["--data-root", data_root.to_str().unwrap()])
        .args(["start", "--scale", "tiny", "--foreground"])
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let view = stderr(&out);
    assert!(out.status.success(), "{view}\n{}", stdout(&out));
    assert!(view.contains("finished"), "{view}");
    // One clean stream: the event view, no tracing lines; those are in the daemon log.
    for line in view.lines() {
        assert!(
            !line.contains(" INFO ") && !line.contains(" WARN ") && !line.contains("lavenderd::"),
            "a tracing line in the foreground view: {line}\n{view}"
        );
        assert!(
            !line.contains("ALERT"),
            "a finished pipeline is no alert: {view}"
        );
    }
    let log = std::fs::read_to_string(data_root.join("state/lavenderd.log")).unwrap();
    assert!(log.contains("worker started"), "{log}");
    let started: String = std::fs::read_dir(data_root.join("logs"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(
        started.contains(&prefix.join("bin/lavender-worker").display().to_string()),
        "the worker beside lavenderd ran: {started}"
    );

    // Without a worker anywhere, the error names both places and `make install`.
    let alone = dir.path().join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    // A hard link, not a copy: a file this process wrote could be held open by a
    // child another test thread forks meanwhile, and would not run ("Text file busy").
    std::fs::hard_link(prefix.join("bin/lavenderd"), alone.join("lavenderd")).unwrap();
    let out = Command::new(alone.join("lavenderd"))
        .args(["--config", config.to_str().unwrap()])
        .args(["--data-root", dir.path().join("data2").to_str().unwrap()])
        .args(["start", "--scale", "tiny", "--foreground"])
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = stderr(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("make install"), "{text}");
    assert!(text.contains(SYSTEM_PATH), "names PATH: {text}");
    assert!(
        text.contains(&alone.display().to_string()),
        "names the folder beside lavenderd: {text}"
    );
    std::fs::remove_dir_all(&alone).unwrap();
    let _ = std::fs::remove_dir_all(dir.path().join("data2"));

    // Uninstall removes exactly what install wrote.
    let out = Command::new("bash")
        .arg(repo().join("scripts/install.sh"))
        .arg("uninstall")
        .arg(&prefix)
        .output()
        .unwrap();
    ok("scripts/install.sh uninstall", &out);
    let mut after = tree(dir.path());
    after.retain(|p| {
        !p.starts_with("corpus") && !p.starts_with("data") && p != Path::new("lavender.yaml")
    });
    assert_eq!(after, before, "uninstall left or removed something else");
}
