//! One file per CLI command.

pub mod config;
pub mod listing;
pub mod logs;
pub mod prune;
pub mod start;
pub mod status;
pub mod stop;

use std::process::ExitCode;

use anyhow::Result;

use super::{Cli, Command, ConfigAction};
use crate::daemon::{self, DaemonExit, ServeOptions};
use crate::settings::Settings;

pub async fn dispatch(cli: Cli) -> Result<ExitCode> {
    if let Command::Config {
        action: ConfigAction::Check,
    } = &cli.command
    {
        return config::check(&cli.global);
    }
    let settings = Settings::load(&cli.global)?;
    match cli.command {
        Command::Serve { listen } => {
            daemon::run(ServeOptions {
                args: cli.global.clone(),
                settings,
                listen: listen.listen,
                allow_non_loopback: listen.allow_non_loopback,
                start: None,
                foreground: false,
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Start {
            flags,
            foreground: true,
            listen,
        } => {
            let req = flags.request(cli.global.data_root.clone());
            let exit = daemon::run(ServeOptions {
                args: cli.global.clone(),
                settings,
                listen: listen.listen,
                allow_non_loopback: listen.allow_non_loopback,
                start: Some(req),
                foreground: true,
            })
            .await?;
            Ok(match exit {
                DaemonExit::PipelineEnded(lavender::status::PipelineState::Failed) => {
                    ExitCode::FAILURE
                }
                _ => ExitCode::SUCCESS,
            })
        }
        Command::Start { flags, listen, .. } => {
            start::run(&settings, &cli.global, &flags, &listen).await
        }
        Command::Stop { timeout } => stop::run(&settings, timeout).await,
        Command::Status {
            watch: true,
            interval,
            ..
        } => crate::cli::watch::run(&settings, interval).await,
        Command::Status { json, .. } => status::run(&settings, json).await,
        Command::Logs { follow, lines } => logs::run(&settings, follow, lines).await,
        Command::Runs { json } => listing::runs(&settings, json),
        Command::Checkpoints { run, json } => listing::checkpoints(&settings, run.as_deref(), json),
        Command::Prune { keep_runs } => prune::run(&settings, keep_runs),
        Command::Config { .. } => unreachable!("handled above"),
    }
}
