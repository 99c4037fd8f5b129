//! `lavenderd daemon stop`: end a daemon started in the background (`lavenderd
//! start`) the way a service stop ends one: SIGTERM to the daemon, which stops the
//! pipeline with a save first (the worker finishes its step and saves), then exits.
//! Waits until it has gone and says where the pipeline stands. Exit code 4 when no
//! daemon runs on this state directory.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lavender::layout::Layout;
use lavender::pipeline_file::PipelineRecord;
use lavender::status::PipelineState;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::stop::EXIT_NOT_RUNNING;
use crate::daemon::lock;
use crate::settings::Settings;

/// Beyond the stop timeout (after which the daemon kills the worker): time for the
/// daemon itself to finish, as the service units allow.
const EXIT_MARGIN: Duration = Duration::from_secs(30);

pub async fn run(settings: &Settings) -> Result<ExitCode> {
    let layout = &settings.layout;
    let Some(pid) = lock::holder(layout) else {
        println!(
            "no lavenderd is running on {}; nothing to stop",
            layout.state_dir.display()
        );
        return Ok(ExitCode::from(EXIT_NOT_RUNNING));
    };
    let stop_timeout = Duration::from_secs(settings.config.supervisor.stop_timeout_s);
    println!(
        "lavenderd (pid {pid}) is stopping: the pipeline stops with a save first (the worker is killed after {} s)",
        stop_timeout.as_secs()
    );
    terminate(layout, pid, stop_timeout + EXIT_MARGIN).await?;
    let record = PipelineRecord::load(layout)?;
    let newest = record
        .run_dir
        .as_deref()
        .and_then(|d| lavender::checkpoint::latest_complete(d).ok().flatten());
    let hint = if record.state.kind() == PipelineState::Finished {
        ""
    } else {
        "; `lavenderd start --resume latest` continues it"
    };
    match newest {
        Some(c) => println!(
            "lavenderd stopped; pipeline {}, newest checkpoint {} (step {}){hint}",
            record.state.kind(),
            c.name,
            c.state.step
        ),
        None => println!("lavenderd stopped; pipeline {}", record.state.kind()),
    }
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM to the daemon `pid` holding `layout`'s lock, then waits until it has let
/// go of the lock (held until its last moment), at most `wait`.
pub(crate) async fn terminate(layout: &Layout, pid: u32, wait: Duration) -> Result<()> {
    let raw = i32::try_from(pid).context("the daemon's pid is out of range")?;
    kill(Pid::from_raw(raw), Signal::SIGTERM)
        .with_context(|| format!("signal lavenderd (pid {pid})"))?;
    let deadline = Instant::now() + wait;
    while lock::holder(layout) == Some(pid) {
        if Instant::now() > deadline {
            bail!(
                "lavenderd (pid {pid}) has not exited after {} s; see its log {}",
                wait.as_secs(),
                layout.daemon_log().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
