//! One file per CLI command.

pub mod attribute;
pub mod config;
pub mod daemon_stop;
pub mod debug;
pub mod drill;
pub mod export;
pub mod incidents;
pub mod listing;
pub mod logs;
pub mod notify;
pub mod prune;
pub mod pull;
pub mod reload;
pub mod resolve;
pub mod restart;
pub mod serve;
pub mod start;
pub mod status;
pub mod stop;
pub mod verify;

use std::process::ExitCode;

use anyhow::Result;

use super::{
    AttributeArgs, Command, ConfigAction, DaemonAction, ExportArgs, NotifyAction, PipelineFlags,
    StartArgs, StatusArgs, watch,
};
use crate::settings::{GlobalArgs, Settings};

pub async fn dispatch(global: GlobalArgs, command: Command) -> Result<ExitCode> {
    let say = say_for(&command);
    // Loaded by the commands that read a data root, which say which first.
    let settings = || Settings::load(&global).inspect(|s| announce(s, say));
    match command {
        Command::Serve(args) => serve::run(settings()?, args).await,
        Command::Start(args) => start_pipeline(settings()?, &global, args).await,
        Command::Stop { timeout } => stop::run(&settings()?, timeout).await,
        Command::Reload => reload::run(&settings()?).await,
        Command::Daemon { action } => daemon_action(&settings()?, action).await,
        Command::Status(args) if args.watch => watch::run(&settings()?, args.interval).await,
        Command::Status(args) => status::run(&settings()?, args.json).await,
        Command::Logs { follow, lines } => logs::run(&settings()?, follow, lines).await,
        Command::Debug { action } => match action {
            super::DebugAction::Stacks => debug::stacks(&settings()?).await,
        },
        Command::Incidents { json, last } => incidents::run(&settings()?, json, last),
        Command::Runs { json } => listing::runs(&settings()?, json),
        Command::Checkpoints { run, json } => {
            pull::checkpoints(&settings()?, run.as_deref(), json).await
        }
        Command::Drill {
            run,
            checkpoint,
            steps,
            json,
        } => Ok(settings()
            .and_then(|s| drill::run(&s, run.as_deref(), checkpoint.as_deref(), steps, json))
            .unwrap_or_else(|e| {
                eprintln!("lavenderd: {e:#}");
                ExitCode::from(2)
            })),
        // 1 is damage found; a check that could not run is 2, so a cron job tells them apart.
        Command::Verify { run, all, json } => Ok(settings()
            .and_then(|s| verify::run(&s, run.as_deref(), all, json))
            .unwrap_or_else(|e| {
                eprintln!("lavenderd: {e:#}");
                ExitCode::from(2)
            })),
        Command::Prune {
            keep_runs,
            yes,
            remote,
        } => prune::run(&settings()?, keep_runs, yes, remote).await,
        Command::Pull { run, checkpoint } => {
            pull::run(&settings()?, run.as_deref(), checkpoint.as_deref()).await
        }
        Command::Service { action } => crate::service::run(&settings()?, action).await,
        Command::Export(args) => export::run(&settings()?, args),
        Command::Resolve(args) => resolve::run(args),
        Command::Attribute(args) => attribute::run(&settings()?, args),
        Command::Notify { action } => notify_action(&settings()?, action).await,
        // It loads the config itself, to say what is wrong with it.
        Command::Config { action } => config_action(&global, action),
    }
}

/// `start`: a start with nothing to do says so before any daemon is started or
/// asked; `--foreground` runs the daemon in this process.
async fn start_pipeline(
    settings: Settings,
    global: &GlobalArgs,
    args: StartArgs,
) -> Result<ExitCode> {
    if let Some(line) = nothing_to_do(&settings, &args.flags)? {
        println!("{line}");
        return Ok(ExitCode::SUCCESS);
    }
    pull::before_resume(&settings, args.flags.resume.as_deref()).await?;
    if args.foreground {
        serve::foreground(settings, global, args).await
    } else {
        start::run(&settings, global, &args.flags, &args.listen).await
    }
}

async fn daemon_action(settings: &Settings, action: DaemonAction) -> Result<ExitCode> {
    match action {
        DaemonAction::Restart => restart::run(settings).await,
        DaemonAction::Stop => daemon_stop::run(settings).await,
    }
}

async fn notify_action(settings: &Settings, action: NotifyAction) -> Result<ExitCode> {
    match action {
        NotifyAction::Test { channel } => notify::test(settings, channel.as_deref()).await,
    }
}

fn config_action(global: &GlobalArgs, action: ConfigAction) -> Result<ExitCode> {
    match action {
        ConfigAction::Check => config::check(global),
    }
}

/// Where a command says which data root it reads and how it was chosen.
#[derive(Clone, Copy)]
enum Say {
    /// Its first line on stdout (human output).
    Stdout,
    /// On stderr: its stdout is a JSON array (or a JSON document it does not own),
    /// which a field cannot join, a service file, or a daemon's log.
    Stderr,
    /// In its JSON object, as the `data_root` field (`status --json`, `export --json`).
    Field,
    /// It reads no data root (`resolve` takes checkpoint paths).
    Nothing,
}

fn say_for(command: &Command) -> Say {
    match command {
        Command::Resolve(_) | Command::Config { .. } => Say::Nothing,
        Command::Status(StatusArgs {
            json: true,
            watch: false,
            ..
        })
        | Command::Export(ExportArgs { json: true, .. }) => Say::Field,
        Command::Serve(_)
        | Command::Service { .. }
        | Command::Runs { json: true }
        | Command::Incidents { json: true, .. }
        | Command::Checkpoints { json: true, .. }
        | Command::Verify { json: true, .. }
        | Command::Drill { json: true, .. }
        | Command::Attribute(AttributeArgs { json: true, .. }) => Say::Stderr,
        _ => Say::Stdout,
    }
}

/// Says which data root the command reads and how it was chosen and, when that
/// folder holds nothing while another place it looks at does, which and the flag
/// (docs/OPERATIONS.md, "Which data root").
fn announce(settings: &Settings, say: Say) {
    let root = &settings.data_root;
    let lines = std::iter::once(root.line()).chain(root.hint());
    match say {
        Say::Stdout => lines.for_each(|l| println!("{l}")),
        Say::Stderr => lines.for_each(|l| eprintln!("{l}")),
        Say::Field | Say::Nothing => {}
    }
}

/// A start on a chunk whose steps have all finished (and no `--force`): the line that
/// says so, before any daemon is started or asked. A daemon that runs answers the
/// same itself when the files said otherwise (the same `lavender::steps::nothing_to_do`).
fn nothing_to_do(settings: &Settings, flags: &PipelineFlags) -> Result<Option<String>> {
    let layout = &settings.layout;
    let req = flags.request(Some(layout.data_root.clone()), &settings.config)?;
    let record = lavender::pipeline_file::PipelineRecord::load(layout)?;
    // The command's own process: reading the files here blocks no one.
    let files = lavender::steps::inputs::LocalFiles::read(&settings.config);
    Ok(lavender::steps::nothing_to_do(
        layout,
        &settings.config,
        &files,
        &record,
        &req,
    ))
}
