//! One file per CLI command.

pub mod attribute;
pub mod config;
pub mod daemon_stop;
pub mod listing;
pub mod logs;
pub mod notify;
pub mod prune;
pub mod reload;
pub mod restart;
pub mod start;
pub mod status;
pub mod stop;

use std::process::ExitCode;

use anyhow::Result;

use super::{Cli, Command, ConfigAction, DaemonAction, NotifyAction};
use crate::daemon::{self, DaemonExit, ServeOptions};
use crate::settings::Settings;

pub async fn dispatch(cli: Cli) -> Result<ExitCode> {
    if let Command::Config {
        action: ConfigAction::Check,
    } = &cli.command
    {
        return config::check(&cli.global);
    }
    let mut settings = Settings::load(&cli.global)?;
    announce(&settings, &cli.command);
    if let Command::Start { flags, .. } = &cli.command
        && let Some(line) = nothing_to_do(&settings, flags)?
    {
        println!("{line}");
        return Ok(ExitCode::SUCCESS);
    }
    match cli.command {
        Command::Serve {
            listen,
            tuning,
            no_resume,
        } => {
            if no_resume {
                settings.config.supervisor.resume_on_start = false;
            }
            daemon::run(ServeOptions {
                settings,
                listen: listen.listen,
                allow_non_loopback: listen.allow_non_loopback,
                start: None,
                foreground: false,
                status: tuning.status_options(),
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Start {
            flags,
            foreground: true,
            listen,
        } => {
            let req = flags.request(cli.global.data_root.clone(), &settings.config)?;
            start::confirm_fresh(&settings, &flags)?;
            // The start says what to run: an interrupted pipeline is not resumed first.
            settings.config.supervisor.resume_on_start = false;
            crate::logging::to_file(&settings.layout.daemon_log(), settings.config.logging)?;
            eprintln!(
                "lavenderd: daemon log {} (warnings and errors also show here)",
                settings.layout.daemon_log().display()
            );
            let exit = daemon::run(ServeOptions {
                settings,
                listen: listen.listen,
                allow_non_loopback: listen.allow_non_loopback,
                start: Some(req),
                foreground: true,
                status: Default::default(),
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
        Command::Reload => reload::run(&settings).await,
        Command::Daemon {
            action: DaemonAction::Restart,
        } => restart::run(&settings).await,
        Command::Daemon {
            action: DaemonAction::Stop,
        } => daemon_stop::run(&settings).await,
        Command::Status {
            watch: true,
            interval,
            ..
        } => crate::cli::watch::run(&settings, interval).await,
        Command::Status { json, .. } => status::run(&settings, json).await,
        Command::Logs { follow, lines } => logs::run(&settings, follow, lines).await,
        Command::Runs { json } => listing::runs(&settings, json),
        Command::Checkpoints { run, json } => listing::checkpoints(&settings, run.as_deref(), json),
        Command::Prune { keep_runs, yes } => prune::run(&settings, keep_runs, yes),
        Command::Service { action } => crate::service::run(&settings, action).await,
        Command::Export {
            run,
            checkpoints,
            all,
            out,
            force,
            ema,
            json,
        } => {
            use lavender_export::{self as export, ExportOptions, Selection};
            let run = export::locate_run(&settings.layout.checkpoints_root(), run.as_deref())?;
            let selection = if all {
                Selection::All
            } else if checkpoints.is_empty() {
                Selection::Latest
            } else {
                Selection::Named(checkpoints)
            };
            let r = export::export(&ExportOptions {
                run,
                selection,
                out,
                force,
                ema,
            })?;
            if json {
                let mut out: serde_json::Value = serde_json::from_str(&export::export_json(&r))?;
                out["data_root"] = settings.data_root.to_json();
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                print!("{}", export::export_text(&r));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Resolve {
            checkpoints,
            segments,
            model_path,
            momentum,
            step_lrs,
            lr_list,
            step_size_list,
            use_adam_preconditioner,
            json,
        } => {
            use lavender_export::{self as export, ResolveOptions};
            let list = |option, spec: Option<String>| {
                spec.as_deref()
                    .map(|s| export::parse_list(option, s))
                    .transpose()
            };
            let step_size_list = list("--step-size-list", step_size_list)?
                .map(|l| {
                    l.into_iter()
                        .map(|n| {
                            (n >= 0.0 && n.fract() == 0.0)
                                .then_some(n as u64)
                                .ok_or_else(|| {
                                    anyhow::anyhow!("--step-size-list: {n} is not a step count")
                                })
                        })
                        .collect::<Result<Vec<u64>>>()
                })
                .transpose()?;
            let r = export::resolve(&ResolveOptions {
                checkpoints,
                model_path,
                momentum,
                step_lrs: list("--step-lrs", step_lrs)?,
                segments,
                lr_list: list("--lr-list", lr_list)?,
                step_size_list,
                use_adam_preconditioner,
            })?;
            print!(
                "{}",
                if json {
                    export::resolve_json(&r)
                } else {
                    export::resolve_yaml(&r)
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Attribute {
            run,
            queries,
            train,
            from_run: _,
            top,
            segments,
            out,
            python,
            batch_tokens,
            no_cache,
            json,
        } => attribute::run(
            &settings,
            &lavender_export::attribute::AttributeArgs {
                run,
                queries,
                train,
                top,
                segments,
                out,
                python,
                json,
                batch_tokens,
                no_cache,
            },
        ),
        Command::Notify {
            action: NotifyAction::Test { channel },
        } => notify::test(&settings, channel.as_deref()).await,
        Command::Config { .. } => unreachable!("handled above"),
        Command::LogRelay { .. } => unreachable!("main runs it before the runtime starts"),
    }
}

/// Where a command says which data root it reads and how it was chosen.
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
        Command::Resolve { .. } | Command::Config { .. } | Command::LogRelay { .. } => Say::Nothing,
        Command::Status {
            json: true,
            watch: false,
            ..
        }
        | Command::Export { json: true, .. } => Say::Field,
        Command::Serve { .. }
        | Command::Service { .. }
        | Command::Runs { json: true }
        | Command::Checkpoints { json: true, .. }
        | Command::Attribute { json: true, .. } => Say::Stderr,
        _ => Say::Stdout,
    }
}

/// Says which data root the command reads and how it was chosen and, when that
/// folder holds nothing while another place it looks at does, which and the flag
/// (docs/OPERATIONS.md, "Which data root").
fn announce(settings: &Settings, command: &Command) {
    let root = &settings.data_root;
    let lines = std::iter::once(root.line()).chain(root.hint());
    match say_for(command) {
        Say::Stdout => lines.for_each(|l| println!("{l}")),
        Say::Stderr => lines.for_each(|l| eprintln!("{l}")),
        Say::Field | Say::Nothing => {}
    }
}

/// A start on a chunk whose steps have all finished (and no `--force`): the line that
/// says so, before any daemon is started or asked. A daemon that runs answers the
/// same itself when the files said otherwise (`pipeline::plan::nothing_to_do`).
fn nothing_to_do(settings: &Settings, flags: &super::PipelineFlags) -> Result<Option<String>> {
    let layout = &settings.layout;
    let req = flags.request(Some(layout.data_root.clone()), &settings.config)?;
    let record = crate::pipeline::PipelineRecord::load(layout)?;
    // The command's own process: reading the files here blocks no one.
    let files = crate::pipeline::inputs::LocalFiles::read(&settings.config);
    Ok(crate::pipeline::plan::nothing_to_do(
        layout,
        &settings.config,
        &files,
        &record,
        &req,
    ))
}
