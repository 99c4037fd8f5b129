//! `lavenderd service install|uninstall|status`: run the daemon under the OS's
//! service manager (systemd on Linux, a launchd LaunchAgent on macOS) with this
//! binary, data root and config, so it starts at boot or login, survives logouts,
//! and never loses training when stopped.

pub mod launchd;
pub(crate) mod manage;
pub mod spec;
pub mod systemd;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use lavender_api::endpoint::Healthz;

pub use spec::ServiceSpec;

use crate::settings::Settings;

/// Which service manager a unit is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ServiceOs {
    /// systemd
    Linux,
    /// launchd (LaunchAgent)
    Macos,
}

impl ServiceOs {
    pub fn host() -> ServiceOs {
        if cfg!(target_os = "macos") {
            ServiceOs::Macos
        } else {
            ServiceOs::Linux
        }
    }
}

impl std::fmt::Display for ServiceOs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServiceOs::Linux => "linux",
            ServiceOs::Macos => "macos",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Started at boot by the system manager.
    System,
    /// The user's manager (`systemctl --user`; every macOS LaunchAgent).
    User,
}

#[derive(Args, Debug, Clone)]
pub struct ServiceTarget {
    /// A per-user service (`systemctl --user`). A macOS LaunchAgent is always per-user.
    #[arg(long)]
    pub user: bool,
    /// The service manager to write for (default: this OS's). Other than this OS's only with --print.
    #[arg(long, value_enum, value_name = "linux|macos")]
    pub os: Option<ServiceOs>,
}

#[derive(Subcommand, Debug)]
pub enum ServiceAction {
    /// Write the unit for this OS (this binary, data root and config), enable and start
    /// it; prints the commands to run when it cannot (exit code 2).
    Install {
        #[command(flatten)]
        target: ServiceTarget,
        /// Print the unit instead of writing it.
        #[arg(long)]
        print: bool,
        /// System unit: the account the daemon runs as (default: the user behind sudo, else you).
        #[arg(long, value_name = "USER")]
        run_as: Option<String>,
    },
    /// Stop the service (the worker saves first), disable it and remove the unit.
    /// Asks first on a terminal; without one it needs --yes.
    Uninstall {
        #[command(flatten)]
        target: ServiceTarget,
        /// Uninstall without asking (needed when there is no terminal to ask on).
        #[arg(long)]
        yes: bool,
    },
    /// Where the unit is, whether it is current, what the service manager and the daemon say.
    /// Exit code 3 when not installed.
    Status {
        #[command(flatten)]
        target: ServiceTarget,
    },
}

impl ServiceTarget {
    fn spec(&self, settings: &Settings, run_as: Option<String>) -> Result<ServiceSpec> {
        let scope = if self.user {
            Scope::User
        } else {
            Scope::System
        };
        ServiceSpec::from_settings(
            settings,
            self.os.unwrap_or_else(ServiceOs::host),
            scope,
            run_as,
        )
    }
}

/// Renders the unit for `spec`.
pub fn render(spec: &ServiceSpec) -> String {
    match spec.os {
        ServiceOs::Linux => systemd::render(spec),
        ServiceOs::Macos => launchd::render(spec),
    }
}

/// A daemon already serving this data root, with no unit installed yet, holds the
/// state lock: the service's daemon cannot start until it exits. Killing it (not
/// stopping it) hands the running worker over without losing training.
async fn warn_if_a_daemon_runs_outside(spec: &ServiceSpec, settings: &Settings) {
    if spec.os != ServiceOs::host() || manage::unit_path(spec).exists() {
        return;
    }
    let client = crate::client::Client::new(&settings.layout.socket());
    let Ok(resp) = client.call::<Healthz>(&()).await else {
        return;
    };
    let pid = resp.reply().ok().map(|h| h.pid);
    if let (200, Some(pid)) = (resp.status, pid) {
        eprintln!(
            "note: lavenderd (pid {pid}) already serves {} outside the service; the service's daemon \
             retries every 5 s until it exits. `kill -KILL {pid}` hands a running worker over to the \
             service without stopping it (the service's daemon re-adopts it); `lavenderd stop` would stop training.",
            settings.layout.data_root.display()
        );
    }
}

pub async fn run(settings: &Settings, action: ServiceAction) -> Result<ExitCode> {
    match action {
        ServiceAction::Install {
            target,
            print,
            run_as,
        } => {
            let spec = target.spec(settings, run_as)?;
            if print {
                print!("{}", render(&spec));
                return Ok(ExitCode::SUCCESS);
            }
            warn_if_a_daemon_runs_outside(&spec, settings).await;
            manage::install(&spec)
        }
        ServiceAction::Uninstall { target, yes } => {
            manage::uninstall(&target.spec(settings, None)?, yes)
        }
        ServiceAction::Status { target } => {
            manage::status(&target.spec(settings, None)?, settings).await
        }
    }
}
