//! What a service unit runs: this binary, `serve` with the data root and config the
//! CLI resolved, the variables that shape the config, and the stop timeout. The
//! renderers (`systemd.rs`, `launchd.rs`) turn one of these into a unit file.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{Scope, ServiceOs};
use crate::settings::Settings;

/// systemd's `TimeoutStopSec` / launchd's `ExitTimeOut` exceed the daemon's stop grace
/// (`supervisor.stop_timeout_s`) by this much, so the daemon always gets to SIGKILL a
/// stuck worker and exit by itself before the service manager kills it.
pub const STOP_MARGIN_S: u64 = 30;

/// The installing shell's variables the service keeps: the config layers
/// (`LAVENDER_SCALE|CHUNK|SEED`, `LAVENDER__A__B`), the log filter, and what a
/// libtorch worker needs to find its libraries.
fn carried(name: &str) -> bool {
    matches!(
        name,
        "LAVENDER_SCALE"
            | "LAVENDER_CHUNK"
            | "LAVENDER_SEED"
            | "LAVENDER_LOG"
            | "LIBTORCH"
            | "LD_LIBRARY_PATH"
    ) || name.starts_with("LAVENDER__")
}

/// Directories every service `PATH` ends with (service managers start with a bare one).
const SYSTEM_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    pub os: ServiceOs,
    pub scope: Scope,
    /// The `lavenderd` executable the unit starts.
    pub binary: PathBuf,
    pub data_root: PathBuf,
    pub state_dir: PathBuf,
    pub config_file: Option<PathBuf>,
    /// Environment of the service, in order.
    pub env: Vec<(String, String)>,
    /// `supervisor.stop_timeout_s`.
    pub stop_timeout_s: u64,
    /// System units: the account the daemon runs as (None: root).
    pub run_as: Option<String>,
    /// User units: paths under it are written as `%h/…` (systemd).
    pub home: Option<PathBuf>,
}

impl ServiceSpec {
    /// The spec for this binary and the resolved settings.
    pub fn from_settings(
        settings: &Settings,
        os: ServiceOs,
        scope: Scope,
        run_as: Option<String>,
    ) -> Result<ServiceSpec> {
        // The path lavenderd was run by, not its symlink's target: an upgrade that
        // swaps the symlink (or replaces the file) there keeps the unit valid, and
        // `lavenderd daemon restart` runs the new version.
        let binary = crate::exe::invoked_exe()?;
        let process_env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let worker = settings.config.worker.command.first().map(String::as_str);
        let env = service_env(&binary, worker, &process_env);
        let scope = if os == ServiceOs::Macos {
            Scope::User
        } else {
            scope
        };
        let run_as = match scope {
            Scope::User => None,
            Scope::System => run_as.or_else(invoking_user),
        };
        Ok(ServiceSpec {
            os,
            scope,
            binary,
            data_root: settings.layout.data_root.clone(),
            state_dir: settings.layout.state_dir.clone(),
            config_file: settings.config_file.clone(),
            env,
            stop_timeout_s: settings.config.supervisor.stop_timeout_s,
            run_as,
            home: home_dir(),
        })
    }

    /// `serve` and the options that pin it to this data root and config.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "serve".to_string(),
            "--data-root".to_string(),
            self.data_root.display().to_string(),
        ];
        if self.state_dir != self.data_root.join("state") {
            args.extend(["--state-dir".into(), self.state_dir.display().to_string()]);
        }
        if let Some(c) = &self.config_file {
            args.extend(["--config".into(), c.display().to_string()]);
        }
        args
    }

    /// `TimeoutStopSec` / `ExitTimeOut`.
    pub fn stop_timeout_with_margin(&self) -> u64 {
        self.stop_timeout_s + STOP_MARGIN_S
    }

    /// Where the daemon's own output goes under launchd (systemd has the journal).
    pub fn daemon_log(&self) -> PathBuf {
        self.state_dir.join("lavenderd.log")
    }

    /// Paths the daemon writes: the data root, and the state directory when outside it.
    pub fn writable_paths(&self) -> Vec<&Path> {
        let mut out = vec![self.data_root.as_path()];
        if !self.state_dir.starts_with(&self.data_root) {
            out.push(self.state_dir.as_path());
        }
        out
    }
}

/// `PATH` first holds this binary's directory and the worker's (when `worker.command`
/// is a bare name found on the current `PATH`), so the service runs the same worker
/// the shell would; then the system directories. Plus the carried variables.
fn service_env(
    binary: &Path,
    worker: Option<&str>,
    process_env: &[(String, String)],
) -> Vec<(String, String)> {
    let current_path = process_env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("");
    let mut dirs: Vec<String> = Vec::new();
    let mut push = |d: String| {
        if !d.is_empty() && !dirs.contains(&d) {
            dirs.push(d);
        }
    };
    if let Some(dir) = binary.parent() {
        push(dir.display().to_string());
    }
    if let Some(w) = worker.filter(|w| !w.contains('/'))
        && let Some(dir) = std::env::split_paths(current_path).find(|d| d.join(w).is_file())
    {
        push(dir.display().to_string());
    }
    for d in SYSTEM_PATH {
        push(d.to_string());
    }
    let mut env = vec![("PATH".to_string(), dirs.join(":"))];
    let mut carried_vars: Vec<(String, String)> = process_env
        .iter()
        .filter(|(k, _)| carried(k))
        .cloned()
        .collect();
    carried_vars.sort();
    if !carried_vars.iter().any(|(k, _)| k == "LAVENDER_LOG") {
        env.push(("LAVENDER_LOG".into(), "info".into()));
    }
    env.extend(carried_vars);
    env
}

/// The account a system unit runs as: the user behind `sudo`, else the current
/// user unless that is root.
fn invoking_user() -> Option<String> {
    let euid = nix::unistd::geteuid();
    if euid.is_root() {
        return std::env::var("SUDO_USER")
            .ok()
            .filter(|u| !u.is_empty() && u != "root");
    }
    nix::unistd::User::from_uid(euid)
        .ok()
        .flatten()
        .map(|u| u.name)
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map(|u| u.dir)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn path_leads_with_the_binary_and_the_worker_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("my-worker"), "").unwrap();
        let path = format!("/nowhere:{}", dir.path().display());
        let out = service_env(
            Path::new("/opt/lav/bin/lavenderd"),
            Some("my-worker"),
            &env(&[("PATH", &path)]),
        );
        let want = format!(
            "/opt/lav/bin:{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            dir.path().display()
        );
        assert_eq!(out[0], ("PATH".to_string(), want));
    }

    #[test]
    fn config_variables_are_carried_and_others_are_not() {
        let out = service_env(
            Path::new("/usr/bin/lavenderd"),
            None,
            &env(&[
                ("LAVENDER__TRAINING__BATCH_SIZE", "4"),
                ("LAVENDER_SCALE", "tiny"),
                ("LAVENDER_DATA_ROOT", "/x"),
                ("LAVENDER_OTHER_TOOL", "1"),
                ("NOTIFY_SOCKET", "/run/x"),
                ("HOME", "/root"),
            ]),
        );
        let names: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "PATH",
                "LAVENDER_LOG",
                "LAVENDER_SCALE",
                "LAVENDER__TRAINING__BATCH_SIZE"
            ]
        );
    }
}
