//! Spawning a worker: its own session and process group (process-wrap's
//! `ProcessSession`), its generation's marker in its environment (`generation.rs`)
//! and its generation's own cgroup where the daemon can make one (`cgroup.rs`), stdout/stderr through a relay into the rotating pipeline log
//! (`logs::relay`), no stdin, and none of the service-manager variables that would
//! let it talk to systemd as us.

use std::process::Stdio;

use anyhow::{Context, Result};
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessSession};

use super::{ProcessIdentity, SpawnSpec};
use crate::exit::ExitOutcome;

/// Variables that belong to the daemon's service manager, not to the worker.
pub const SCRUBBED_ENV: &[&str] = &[
    "NOTIFY_SOCKET",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
];

pub struct Spawned {
    pub identity: ProcessIdentity,
    pub child: Box<dyn ChildWrapper>,
    /// The daemon tells the story into the worker's log until it ends (`logs::story`).
    pub story: Option<u64>,
}

/// Starts the worker. The child is not killed when the daemon exits or drops it:
/// training outlives the daemon, which re-adopts it on restart.
pub fn spawn(spec: &SpawnSpec) -> Result<Spawned> {
    let argv = spec.argv();
    let (program, args) = argv
        .split_first()
        .context("the worker command is empty (config key worker.command)")?;
    // A data root that is not there (its disk unplugged) is not made again by the
    // log's folder: the worker's files would land on the disk beneath.
    if !spec.data_root.is_dir() {
        anyhow::bail!(
            "the data root {} is not there (was its disk unplugged?); the worker is not started",
            spec.data_root.display()
        );
    }
    if let Some(dir) = spec.log_file.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("create log directory {}", dir.display()))?;
    }
    let header = format!(
        "=== {} lavenderd: starting {}\n",
        lavender::time::rfc3339_z(lavender::time::now_utc()),
        shell_words(&argv)
    );
    let (stdout, stderr, story) =
        crate::logs::relay::worker_output(&spec.log_file, spec.log_rotation, &header)?;

    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    cmd.envs(&spec.env);
    // Every process the worker starts inherits it, whatever session it moves to.
    let generation = super::generation::new_token();
    cmd.env(super::generation::GENERATION_ENV, &generation);
    super::generation::become_subreaper();
    if let Some(procs) = super::cgroup::Cgroup::create(&generation).and_then(|c| {
        c.procs_for_child()
            .map_err(|e| tracing::warn!("cannot enter the cgroup {}: {e}", c.dir().display()))
            .ok()
    }) {
        // SAFETY: between fork and exec only write(2) runs, async-signal-safe. A
        // failed move leaves the worker outside the cgroup, found by its marker.
        unsafe {
            cmd.pre_exec(move || {
                let _ = nix::unistd::write(&procs, b"0");
                Ok(())
            });
        }
    }
    let mut wrap = CommandWrap::from(cmd);
    wrap.wrap(ProcessSession);
    let mut launching = super::generation::launching();
    let child = wrap
        .spawn()
        .with_context(|| format!("start worker `{}` (config key worker.command)", program))?;
    let pid = child
        .id()
        .context("the worker exited before its pid was known")?;
    // tokio waits for it: the daemon's reaper must leave it alone.
    launching.register(pid);
    drop(launching);
    // The start time is read right after fork, so it is the worker's own.
    let identity = ProcessIdentity {
        generation: Some(generation),
        ..crate::process::identity::of(pid).unwrap_or(ProcessIdentity {
            pid,
            start_time: String::new(),
            generation: None,
        })
    };
    let story = story.map(|pipe| {
        crate::logs::story::attach(
            spec.log_file.clone(),
            spec.log_rotation,
            pipe,
            spec.progress_every,
        )
    });
    Ok(Spawned {
        identity,
        child,
        story,
    })
}

/// Waits for a spawned child and reports how it ended.
pub async fn wait(mut child: Box<dyn ChildWrapper>, worker: &ProcessIdentity) -> ExitOutcome {
    let status = child.wait().await;
    super::generation::released(worker.pid);
    match status {
        Ok(status) => ExitOutcome::from_status(status),
        Err(e) => {
            tracing::warn!(error = %e, "waiting for the worker failed");
            ExitOutcome::Unknown
        }
    }
}

fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
