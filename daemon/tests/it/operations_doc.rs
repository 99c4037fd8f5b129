//! docs/OPERATIONS.md cannot rot: every ```sh block runs, in order, against a test
//! data root with a real daemon and the fake worker (service managers are stand-ins
//! that record their arguments, which must name the real unit and label); every
//! `lavenderd …` it shows parses against the real CLI; every CLI command and flag,
//! and every field of a live `GET /status`, is documented.

use crate::cli_commands;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::CommandFactory as _;
use lavender_testkit::*;
use lavenderd::service::{launchd, systemd};
use serde_json::Value;

const DOC: &str = include_str!("../../../docs/OPERATIONS.md");

/// The ```sh blocks, in order.
fn sh_blocks(doc: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), l) => {
                block.push_str(l);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unclosed ```sh block");
    blocks
}

/// Inline code spans outside fenced blocks (table cells unescaped).
fn code_spans(doc: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let line = line.replace("\\|", "|");
        spans.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
    }
    spans
}

/// Every `lavenderd …` command line shown: in sh blocks and in inline code.
fn invocations(doc: &str) -> Vec<Vec<String>> {
    let mut texts: Vec<String> = sh_blocks(doc)
        .iter()
        .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
        .collect();
    texts.extend(code_spans(doc));
    let mut out = Vec::new();
    for text in texts {
        let mut rest = text.as_str();
        while let Some(at) = rest.find("lavenderd ") {
            let before = rest[..at].chars().last();
            let after = &rest[at + "lavenderd ".len()..];
            rest = after;
            if before.is_some_and(|c| !(c.is_whitespace() || c == '(' || c == '`')) {
                continue;
            }
            let tokens: Vec<String> = after
                .split_whitespace()
                .take_while(|t| !matches!(*t, "|" | "||" | "&&" | ";" | ">" | "2>&1"))
                .map(|t| t.trim_matches(|c| "[]()\"',.".contains(c)).to_string())
                .filter(|t| !t.is_empty())
                .collect();
            if !tokens.is_empty() {
                out.push(tokens);
            }
        }
    }
    out
}

/// Checks one invocation against the CLI; returns its subcommand path and the long
/// flags it used.
fn check(root: &clap::Command, tokens: &[String]) -> Result<(String, Vec<String>), String> {
    let mut cmd = root;
    let mut path: Vec<String> = Vec::new();
    let mut flags = Vec::new();
    let has_long = |c: &clap::Command, name: &str| {
        c.get_arguments().any(|a| a.get_long() == Some(name))
            || root
                .get_arguments()
                .any(|a| a.is_global_set() && a.get_long() == Some(name))
    };
    let has_short =
        |c: &clap::Command, ch: char| c.get_arguments().any(|a| a.get_short() == Some(ch));
    for token in tokens {
        if token.starts_with('-') {
            for piece in token.split('|').filter(|p| p.starts_with('-')) {
                let name = piece.split('=').next().unwrap();
                if let Some(long) = name.strip_prefix("--") {
                    if !has_long(cmd, long) {
                        return Err(format!("`lavenderd {}` has no --{long}", path.join(" ")));
                    }
                    flags.push(long.to_string());
                } else {
                    let ch = name[1..].chars().next().unwrap_or(' ');
                    if !has_short(cmd, ch) {
                        return Err(format!("`lavenderd {}` has no -{ch}", path.join(" ")));
                    }
                }
            }
        } else if let Some(sub) = cmd.find_subcommand(token) {
            cmd = sub;
            path.push(token.clone());
        }
    }
    if path.is_empty() {
        return Err(format!("`lavenderd {}` names no command", tokens.join(" ")));
    }
    Ok((path.join(" "), flags))
}

#[test]
fn every_lavenderd_command_shown_exists_and_every_command_and_flag_is_shown() {
    let root = lavenderd::cli::Cli::command();
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    let mut paths: BTreeSet<String> = BTreeSet::new();
    let mut errors = Vec::new();
    for tokens in invocations(DOC) {
        match check(&root, &tokens) {
            Ok((path, flags)) => {
                for f in flags {
                    used.insert((path.clone(), f));
                }
                paths.insert(path);
            }
            Err(e) => errors.push(e),
        }
    }
    assert!(
        errors.is_empty(),
        "docs/OPERATIONS.md shows commands the CLI lacks: {errors:#?}"
    );

    let mut missing = Vec::new();
    for (path, cmd) in &cli_commands::leaves() {
        if !paths.contains(path) {
            missing.push(format!("lavenderd {path}"));
        }
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            // Hidden options are for tests (injected timings), not operators.
            if arg.is_global_set() || arg.is_hide_set() || matches!(long, "help" | "version") {
                continue;
            }
            if !used.contains(&(path.clone(), long.to_string())) {
                missing.push(format!("lavenderd {path} --{long}"));
            }
        }
    }
    for arg in root.get_arguments().filter(|a| a.is_global_set()) {
        let long = arg.get_long().unwrap();
        if !used.iter().any(|(_, f)| f == long) {
            missing.push(format!("lavenderd --{long}"));
        }
    }
    assert!(
        missing.is_empty(),
        "not documented in docs/OPERATIONS.md: {missing:#?}"
    );
}

struct DocEnv {
    env: Env,
    vars: Vec<(String, String)>,
}

impl DocEnv {
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.current_dir(self.env.dir.path())
            .env_remove("LAVENDER_SCALE")
            .env_remove("LAVENDER_CHUNK")
            .env_remove("LAVENDER_LOG")
            .env_remove("SUDO_USER")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        c
    }

    fn status(&self) -> Value {
        let out = self
            .command(lavenderd())
            .args(["status", "--json"])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    fn run_block(&self, block: &str) -> Result<String, String> {
        let log = self.env.dir.path().join("block-output.txt");
        let file = std::fs::File::create(&log).unwrap();
        let mut child = self
            .command("bash")
            .args(["-euo", "pipefail", "-c", block])
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err("timed out after 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = std::fs::read_to_string(&log).unwrap_or_default();
        if status.success() {
            Ok(output)
        } else {
            Err(format!("{status}\n{output}"))
        }
    }
}

#[test]
fn every_sh_block_of_the_operations_guide_runs_against_a_live_daemon() {
    // The replication commands run against a real S3 server.
    let s3 = lavender_testkit::s3::S3::start();
    let env = Env::new(
        &["--total-steps", "100000", "--step-ms", "20"],
        &s3.replicate_yaml("guide"),
        "[downloads, train]",
    );
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (shim_dir, calls) = lavender_testkit::service_shims(env.dir.path());
    let bin = lavenderd();
    let bin_dir = bin.parent().unwrap();
    let vars = vec![
        (
            "LAVENDER_DATA_ROOT".to_string(),
            env.data_root.display().to_string(),
        ),
        (
            "LAVENDER_CONFIG".to_string(),
            env.config.display().to_string(),
        ),
        (BACKOFF_VAR.to_string(), backoff_seconds(&env.backoff_ms)),
        ("HOME".to_string(), home.display().to_string()),
        (
            "XDG_CONFIG_HOME".to_string(),
            env.dir.path().join("config").display().to_string(),
        ),
        (
            "PATH".to_string(),
            format!(
                "{}:{}:/usr/local/bin:/usr/bin:/bin",
                shim_dir.display(),
                bin_dir.display()
            ),
        ),
    ];
    let doc = DocEnv { env, vars };

    // What the guide assumes: a daemon (started in the background, as `start` does)
    // training, with a checkpoint written.
    let out = doc.command(lavenderd()).arg("start").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    wait_until(
        Duration::from_secs(20),
        "training with a checkpoint, safely remote",
        || {
            let st = doc.status();
            st["training"]["step"].as_u64().unwrap_or(0) >= 1
                && st["training"]["checkpoints"].as_u64().unwrap_or(0) >= 1
                && st["replication"]["newest_remote"].is_object()
        },
    );

    // Every field of the live status is explained.
    let status = doc.status();
    let mut undocumented = Vec::new();
    for (key, value) in status.as_object().unwrap() {
        match value {
            Value::Object(inner) if key != "steps" => {
                for child in inner.keys() {
                    let name = format!("{key}.{child}");
                    if !DOC.contains(&format!("`{name}`")) {
                        undocumented.push(name);
                    }
                }
            }
            _ => {
                if !DOC.contains(&format!("`{key}`")) {
                    undocumented.push(key.clone());
                }
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "status fields missing from the field table of docs/OPERATIONS.md: {undocumented:?}"
    );

    let blocks = sh_blocks(DOC);
    assert!(
        blocks.len() >= 10,
        "the guide lost its commands: {}",
        blocks.len()
    );
    for (i, block) in blocks.iter().enumerate() {
        if let Err(e) = doc.run_block(block) {
            panic!(
                "docs/OPERATIONS.md ```sh block {} failed:\n{block}\n--- {e}\n--- daemon log ---\n{}",
                i + 1,
                std::fs::read_to_string(doc.env.state_dir().join("lavenderd.log"))
                    .unwrap_or_default()
            );
        }
    }

    // The service-manager commands name the unit and label that install writes.
    let calls = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(
        !calls.is_empty(),
        "the guide shows no service-manager command"
    );
    for call in calls.lines() {
        let ok = if call.starts_with("launchctl") {
            call.contains(launchd::LABEL)
        } else if call.starts_with("loginctl") {
            call.starts_with("loginctl enable-linger ")
        } else {
            call.contains(systemd::UNIT_NAME) || call.ends_with("daemon-reload")
        };
        assert!(
            ok,
            "`{call}` does not name {} / {}",
            systemd::UNIT_NAME,
            launchd::LABEL
        );
    }

    let _ = doc.command(lavenderd()).arg("stop").output();
}
