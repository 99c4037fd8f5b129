//! Installing, removing and inspecting the unit. Each is a short plan of steps
//! (write the unit, run `systemctl …` / `launchctl …`, remove the unit) carried out
//! in order; when a step cannot be done (no permission, no service manager), the
//! steps left are printed as the exact shell commands to run, and the exit code is 2.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use lavender_api::endpoint::Healthz;

use super::spec::ServiceSpec;
use super::{Scope, ServiceOs, launchd, render, systemd};
use crate::client::Client;
use crate::settings::Settings;

/// Install or uninstall could not finish; the commands left were printed.
pub const EXIT_MANUAL: u8 = 2;
/// `service status`: no unit is installed.
pub const EXIT_NOT_INSTALLED: u8 = 3;

pub fn unit_path(spec: &ServiceSpec) -> PathBuf {
    match spec.os {
        ServiceOs::Linux => systemd::unit_path(spec),
        ServiceOs::Macos => launchd::unit_path(spec),
    }
}

/// One thing an install or uninstall does (shown as a command with `--print`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write the unit file (mode 0644).
    Write {
        path: PathBuf,
        contents: String,
    },
    Run(Vec<String>),
    Remove(PathBuf),
}

/// Install: write the unit, make the manager read it, enable and start it.
pub fn install_actions(spec: &ServiceSpec) -> Vec<Action> {
    let path = unit_path(spec);
    let mut steps = vec![Action::Write {
        path: path.clone(),
        contents: render(spec),
    }];
    match spec.os {
        ServiceOs::Linux => {
            steps.push(Action::Run(systemd::systemctl(spec, &["daemon-reload"])));
            steps.push(Action::Run(systemd::systemctl(
                spec,
                &["enable", "--now", systemd::UNIT_NAME],
            )));
            if spec.scope == Scope::User
                && let Some(user) = current_user()
            {
                // Keeps the user's manager (and the daemon) running after logout, and starts it at boot.
                steps.push(Action::Run(vec![
                    "loginctl".into(),
                    "enable-linger".into(),
                    user,
                ]));
            }
        }
        ServiceOs::Macos => steps.push(Action::Run(vec![
            "launchctl".into(),
            "bootstrap".into(),
            launchd::domain(),
            path.display().to_string(),
        ])),
    }
    steps
}

/// Uninstall: stop (the daemon stops the worker with a save), disable, remove.
pub fn uninstall_actions(spec: &ServiceSpec) -> Vec<Action> {
    let path = unit_path(spec);
    match spec.os {
        ServiceOs::Linux => vec![
            Action::Run(systemd::systemctl(
                spec,
                &["disable", "--now", systemd::UNIT_NAME],
            )),
            Action::Remove(path),
            Action::Run(systemd::systemctl(spec, &["daemon-reload"])),
        ],
        ServiceOs::Macos => vec![
            Action::Run(vec![
                "launchctl".into(),
                "bootout".into(),
                format!("{}/{}", launchd::domain(), launchd::LABEL),
            ]),
            Action::Remove(path),
        ],
    }
}

/// What the service manager says about the service.
pub fn status_command(spec: &ServiceSpec) -> Vec<String> {
    match spec.os {
        ServiceOs::Linux => systemd::systemctl(spec, &["status", "--no-pager", systemd::UNIT_NAME]),
        ServiceOs::Macos => vec![
            "launchctl".into(),
            "print".into(),
            format!("{}/{}", launchd::domain(), launchd::LABEL),
        ],
    }
}

fn current_user() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-=:@%+,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn shell(argv: &[String]) -> String {
    argv.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

fn check_host(spec: &ServiceSpec, verb: &str) -> Result<()> {
    let host = ServiceOs::host();
    if spec.os != host {
        bail!(
            "cannot {verb} a {} service on {host}; `lavenderd service install --os {} --print` shows its unit",
            spec.os,
            spec.os
        );
    }
    Ok(())
}

fn write_unit(path: &Path, contents: &str) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    lavender::atomic::write_file(path, contents.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .with_context(|| format!("set the mode of {}", path.display()))
}

/// Runs the steps; on the first that fails, prints it and the rest as commands.
fn carry_out(spec: &ServiceSpec, steps: &[Action]) -> Result<bool> {
    for (i, step) in steps.iter().enumerate() {
        let outcome = match step {
            Action::Write { path, contents } => {
                if std::fs::read_to_string(path).is_ok_and(|c| &c == contents) {
                    println!("{} is up to date", path.display());
                    Ok(())
                } else {
                    write_unit(path, contents).map(|()| println!("wrote {}", path.display()))
                }
            }
            Action::Run(argv) => {
                println!("$ {}", shell(argv));
                match std::process::Command::new(&argv[0])
                    .args(&argv[1..])
                    .status()
                {
                    Ok(s) if s.success() => Ok(()),
                    Ok(s) => Err(anyhow::anyhow!("`{}` failed ({s})", shell(argv))),
                    Err(e) => Err(anyhow::anyhow!("cannot run `{}`: {e}", argv[0])),
                }
            }
            Action::Remove(path) => match std::fs::remove_file(path) {
                Ok(()) => {
                    println!("removed {}", path.display());
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(anyhow::anyhow!("cannot remove {}: {e}", path.display())),
            },
        };
        if let Err(e) = outcome {
            eprintln!("lavenderd: {e:#}");
            eprintln!("Run the rest yourself:");
            for line in manual_commands(spec, &steps[i..])? {
                println!("  {line}");
            }
            return Ok(false);
        }
    }
    Ok(true)
}

/// The steps as shell commands; a unit to write is first saved next to the
/// daemon's state (`<state_dir>/<unit file name>`) and copied from there.
pub fn manual_commands(spec: &ServiceSpec, steps: &[Action]) -> Result<Vec<String>> {
    let sudo = if spec.scope == Scope::System && !nix::unistd::geteuid().is_root() {
        "sudo "
    } else {
        ""
    };
    let mut out = Vec::new();
    for step in steps {
        match step {
            Action::Write { path, contents } => {
                let staged = spec
                    .state_dir
                    .join(path.file_name().context("unit path has no file name")?);
                lavender::layout::Layout::new(spec.data_root.clone(), Some(spec.state_dir.clone()))
                    .ensure_state_dir()
                    .with_context(|| format!("create {}", spec.state_dir.display()))?;
                lavender::atomic::write_file(&staged, contents.as_bytes())
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                out.push(format!(
                    "{sudo}install -D -m 0644 {} {}",
                    shell_quote(&staged.display().to_string()),
                    shell_quote(&path.display().to_string())
                ));
            }
            Action::Run(argv) => {
                let sudo = if argv[0] == "systemctl" { sudo } else { "" };
                out.push(format!("{sudo}{}", shell(argv)));
            }
            Action::Remove(path) => out.push(format!(
                "{sudo}rm -f {}",
                shell_quote(&path.display().to_string())
            )),
        }
    }
    Ok(out)
}

pub fn install(spec: &ServiceSpec) -> Result<ExitCode> {
    check_host(spec, "install")?;
    // The unit makes everything but these read-only: they must exist first.
    std::fs::create_dir_all(&spec.data_root)
        .with_context(|| format!("create the data root {}", spec.data_root.display()))?;
    lavender::layout::Layout::new(spec.data_root.clone(), Some(spec.state_dir.clone()))
        .ensure_state_dir()
        .with_context(|| format!("create {}", spec.state_dir.display()))?;
    if !carry_out(spec, &install_actions(spec))? {
        return Ok(ExitCode::from(EXIT_MANUAL));
    }
    println!(
        "lavenderd is installed ({}) and started for data root {}; `lavenderd service status` shows it",
        unit_path(spec).display(),
        spec.data_root.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn uninstall(spec: &ServiceSpec, yes: bool) -> Result<ExitCode> {
    check_host(spec, "uninstall")?;
    let path = unit_path(spec);
    if !path.exists() {
        println!("no unit at {}: nothing to uninstall", path.display());
        return Ok(ExitCode::from(EXIT_NOT_INSTALLED));
    }
    crate::confirm::confirm(
        &format!(
            "uninstall the lavenderd service: stop it (the pipeline stops with a save), disable it and remove {}; the data root {} stays",
            path.display(),
            spec.data_root.display()
        ),
        yes,
    )?;
    println!(
        "stopping the service: the daemon stops the worker with a checkpoint first (up to {} s)",
        spec.stop_timeout_with_margin()
    );
    if !carry_out(spec, &uninstall_actions(spec))? {
        return Ok(ExitCode::from(EXIT_MANUAL));
    }
    println!(
        "lavenderd is uninstalled; the data root {} is untouched",
        spec.data_root.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn status(spec: &ServiceSpec, settings: &Settings) -> Result<ExitCode> {
    let path = unit_path(spec);
    let installed = match std::fs::read_to_string(&path) {
        Ok(current) if current == render(spec) => {
            println!("unit:   {} (current)", path.display());
            true
        }
        Ok(_) => {
            println!(
                "unit:   {} differs from what `lavenderd service install` would write now (binary, data root, config or stop timeout changed); re-run the install",
                path.display()
            );
            true
        }
        Err(_) => {
            println!("unit:   not installed ({} does not exist)", path.display());
            false
        }
    };
    let socket = settings.layout.socket();
    match Client::new(&socket).call::<Healthz>(&()).await {
        Ok(r) if r.status == 200 => {
            let h = r.reply()?;
            println!(
                "daemon: answering on {} (pid {}, pipeline {})",
                socket.display(),
                h.pid,
                h.state
            );
        }
        _ => println!("daemon: not answering on {}", socket.display()),
    }
    if spec.os == ServiceOs::host() {
        let argv = status_command(spec);
        println!("$ {}", shell(&argv));
        if let Err(e) = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .status()
        {
            println!("cannot run `{}`: {e}", argv[0]);
        }
    }
    Ok(if installed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_NOT_INSTALLED)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(os: ServiceOs, scope: Scope) -> ServiceSpec {
        ServiceSpec {
            os,
            scope,
            binary: "/usr/local/bin/lavenderd".into(),
            data_root: "/srv/lav".into(),
            state_dir: "/srv/lav/state".into(),
            config_file: None,
            env: vec![],
            stop_timeout_s: 120,
            run_as: None,
            home: Some("/Users/ann".into()),
        }
    }

    #[test]
    fn launchd_plan_bootstraps_the_agent_in_the_login_domain() {
        let s = spec(ServiceOs::Macos, Scope::User);
        let steps = install_actions(&s);
        let uid = nix::unistd::getuid();
        assert_eq!(
            steps[1],
            Action::Run(vec![
                "launchctl".into(),
                "bootstrap".into(),
                format!("gui/{uid}"),
                "/Users/ann/Library/LaunchAgents/dev.lavender.lavenderd.plist".into()
            ])
        );
        let un = uninstall_actions(&s);
        assert_eq!(
            un[0],
            Action::Run(vec![
                "launchctl".into(),
                "bootout".into(),
                format!("gui/{uid}/dev.lavender.lavenderd")
            ])
        );
    }

    #[test]
    fn system_plan_enables_and_starts_the_unit() {
        let s = spec(ServiceOs::Linux, Scope::System);
        let steps = install_actions(&s);
        assert!(
            matches!(&steps[0], Action::Write { path, .. } if path == Path::new("/etc/systemd/system/lavenderd.service"))
        );
        assert_eq!(
            steps[2],
            Action::Run(vec![
                "systemctl".into(),
                "enable".into(),
                "--now".into(),
                "lavenderd.service".into()
            ])
        );
    }

    #[test]
    fn quoting_for_the_printed_commands() {
        assert_eq!(shell_quote("/a/b c"), "'/a/b c'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("gui/501"), "gui/501");
    }
}
