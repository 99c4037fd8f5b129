//! `serve` and `start --foreground`: the daemon in this process.

use std::process::ExitCode;

use anyhow::Result;
use lavender::status::PipelineState;

use super::start;
use crate::cli::{ServeArgs, StartArgs};
use crate::daemon::{self, DaemonExit, ServeOptions};
use crate::settings::{GlobalArgs, Settings};

/// `serve`: the daemon until it is stopped.
pub async fn run(mut settings: Settings, args: ServeArgs) -> Result<ExitCode> {
    if args.no_resume {
        settings.config.supervisor.resume_on_start = false;
    }
    daemon::run(ServeOptions {
        settings,
        listen: args.listen.listen,
        allow_non_loopback: args.listen.allow_non_loopback,
        start: None,
        foreground: false,
        status: args.tuning.status_options(),
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// `start --foreground`: daemon and pipeline in this terminal, logging to the daemon
/// log; exit code 1 when the pipeline failed.
pub async fn foreground(
    mut settings: Settings,
    global: &GlobalArgs,
    args: StartArgs,
) -> Result<ExitCode> {
    let req = args
        .flags
        .request(global.data_root.clone(), &settings.config)?;
    start::confirm_fresh(&settings, &args.flags)?;
    // The start says what to run: an interrupted pipeline is not resumed first.
    settings.config.supervisor.resume_on_start = false;
    crate::logging::to_file(&settings.layout.daemon_log(), settings.config.logging)?;
    eprintln!(
        "lavenderd: daemon log {} (warnings and errors also show here)",
        settings.layout.daemon_log().display()
    );
    let exit = daemon::run(ServeOptions {
        settings,
        listen: args.listen.listen,
        allow_non_loopback: args.listen.allow_non_loopback,
        start: Some(req),
        foreground: true,
        status: Default::default(),
    })
    .await?;
    Ok(match exit {
        DaemonExit::PipelineEnded(PipelineState::Failed) => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}
