//! `daemon/README.md` cannot rot: its API table lists exactly the routes the router
//! serves (read from the router's source, and each one found on a live daemon), and
//! its command table every command of the CLI with every flag, and nothing else.

use crate::cli_commands;

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory as _;
use lavender_testkit::*;

const README: &str = include_str!("../../README.md");
const ROUTER: &str = include_str!("../../src/server/mod.rs");

/// The first code span of each row of the table whose header row starts with `header`.
fn first_cells(doc: &str, header: &str) -> Vec<String> {
    let mut lines = doc.lines().skip_while(|l| !l.starts_with(header));
    assert!(
        lines.next().is_some(),
        "daemon/README.md has no table headed `{header}`"
    );
    lines
        .skip(1) // | --- | --- |
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let l = l.replace("\\|", "|");
            l.split('`')
                .nth(1)
                .unwrap_or_else(|| panic!("a row without a code span: {l}"))
                .to_string()
        })
        .collect()
}

#[test]
fn the_api_table_lists_every_route_the_router_serves_and_no_other() {
    let documented: BTreeSet<String> = first_cells(README, "| route |").into_iter().collect();
    let served = router_routes(ROUTER);
    let missing: Vec<_> = served.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&served).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "daemon/README.md's API table is out of date\n  served but not listed: {missing:?}\n  listed but not served: {extra:?}"
    );

    // And the router really serves them: with a method no route has, an existing
    // path answers 405 Method Not Allowed, an unknown one 404.
    let mut env = Env::new(&[], "", "[train]");
    env.serve();
    let ask = |path: &str| {
        env.uds("DELETE", path, None)
            .expect("the daemon answers")
            .status
    };
    assert_eq!(ask("/no-such-route"), 404);
    for route in &served {
        let path = route.split_once(' ').unwrap().1.replace("{id}", "current");
        assert_eq!(
            ask(&path),
            405,
            "{route} is documented and in the source, but the live router does not serve {path}"
        );
    }
}

#[test]
fn the_command_table_lists_every_command_and_flag_and_no_other() {
    let root = lavenderd::cli::Cli::command();
    // Command path → long flags shown for it.
    let mut shown: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    for cell in first_cells(README, "| command |") {
        let mut cmd = &root;
        let mut path = Vec::new();
        let mut flags = BTreeSet::new();
        for token in cell.split_whitespace() {
            let token = token.trim_matches(|c| "[]…".contains(c));
            if token.starts_with('-') {
                for piece in token.split('|') {
                    if let Some(long) = piece.strip_prefix("--") {
                        let long = long.split('=').next().unwrap();
                        if cmd.get_arguments().any(|a| a.get_long() == Some(long)) {
                            flags.insert(long.to_string());
                        } else {
                            errors.push(format!("`{cell}`: {} has no --{long}", path.join(" ")));
                        }
                    }
                }
            } else if let Some(sub) = cmd.find_subcommand(token) {
                cmd = sub;
                path.push(token.to_string());
            }
        }
        if path.is_empty() || cmd.has_subcommands() {
            errors.push(format!("`{cell}` names no command of the CLI"));
            continue;
        }
        shown.entry(path.join(" ")).or_default().extend(flags);
    }
    assert!(
        errors.is_empty(),
        "daemon/README.md's command table shows what the CLI lacks: {errors:#?}"
    );

    let mut missing = Vec::new();
    for (path, cmd) in &cli_commands::leaves() {
        let Some(flags) = shown.get(path) else {
            missing.push(path.clone());
            continue;
        };
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            // Hidden flags are test injections (timings, a forced watcher), not for users.
            if arg.is_global_set() || arg.is_hide_set() || matches!(long, "help" | "version") {
                continue;
            }
            if !flags.contains(long) {
                missing.push(format!("{path} --{long}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in daemon/README.md's command table: {missing:#?}"
    );
}
