//! The systemd unit (`lavenderd.service`, system or `--user`).

use std::path::Path;

use super::Scope;
use super::spec::ServiceSpec;

pub const UNIT_NAME: &str = "lavenderd.service";

/// `%` starts a specifier in every unit setting.
fn specifiers(s: &str) -> String {
    s.replace('%', "%%")
}

/// One word of a setting that takes a list (`ExecStart=`, `ReadWritePaths=`):
/// quoted when it holds whitespace or quotes.
fn word(s: &str) -> String {
    if !s.is_empty() && !s.contains(|c: char| c.is_whitespace() || "\"'\\;".contains(c)) {
        return s.to_string();
    }
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A path, as `%h/…` in a user unit when under the home directory (so the unit
/// reads the same for any user), else literally.
fn path(spec: &ServiceSpec, p: &Path) -> String {
    if spec.scope == Scope::User
        && let Some(home) = &spec.home
        && let Ok(rest) = p.strip_prefix(home)
    {
        let rest = specifiers(&rest.display().to_string());
        return if rest.is_empty() {
            "%h".into()
        } else {
            format!("%h/{rest}")
        };
    }
    specifiers(&p.display().to_string())
}

/// An `ExecStart=` argument that is not a path: `$` would expand a variable.
fn arg(s: &str) -> String {
    word(&specifiers(s).replace('$', "$$"))
}

/// `StateDirectory=` for a data root under /var/lib: systemd creates it (owned by
/// `User=`) even though `ProtectSystem=strict` makes /var read-only.
fn state_directory(data_root: &Path) -> Option<String> {
    let rel = data_root.strip_prefix("/var/lib").ok()?;
    let rel = rel.display().to_string();
    (!rel.is_empty()).then(|| specifiers(&rel))
}

pub fn render(spec: &ServiceSpec) -> String {
    let user = spec.scope == Scope::User;
    let mut u = String::new();
    let mut line = |s: &str| {
        u.push_str(s);
        u.push('\n');
    };
    if user {
        line("# lavenderd as a user service (systemctl --user), written by");
        line("# `lavenderd service install --user`. `loginctl enable-linger $USER` keeps it");
        line("# running after you log out and starts it at boot.");
    } else {
        line("# lavenderd as a system service, written by `lavenderd service install`.");
    }
    line("# Re-run the install after moving the binary or changing the data root or config");
    line("# file. docs/OPERATIONS.md says how to operate the running pipeline.");
    line("[Unit]");
    line(if user {
        "Description=lavender training-pipeline supervisor (user)"
    } else {
        "Description=lavender training-pipeline supervisor"
    });
    if !user {
        line("After=network-online.target local-fs.target");
        line("Wants=network-online.target");
    }
    line("# Waits for the disk holding the data root (an external drive, say).");
    let mounts: Vec<String> = spec
        .writable_paths()
        .iter()
        .map(|p| word(&path(spec, p)))
        .collect();
    line(&format!("RequiresMountsFor={}", mounts.join(" ")));
    line("");
    line("[Service]");
    line("# The daemon says READY=1 once its HTTP and Unix sockets are bound.");
    line("Type=notify");
    line("NotifyAccess=main");
    let mut exec = vec![word(&path(spec, &spec.binary))];
    let args = spec.args();
    let mut i = 0;
    while i < args.len() {
        exec.push(arg(&args[i]));
        // The values of --data-root/--state-dir/--config are paths.
        if args[i].starts_with("--") && i + 1 < args.len() {
            exec.push(word(&path(spec, Path::new(&args[i + 1]))));
            i += 1;
        }
        i += 1;
    }
    line(&format!("ExecStart={}", exec.join(" ")));
    line("# SIGHUP reloads the config; it applies to the next worker started.");
    line("ExecReload=/bin/kill -HUP $MAINPID");
    line("# `lavenderd daemon restart` (SIGUSR2) restarts the daemon alone, after an upgrade:");
    line("# it executes its binary again in place (same MAINPID) and the worker keeps training.");
    line("# `systemctl restart` is a stop (the worker saves) followed by a start.");
    line("Restart=on-failure");
    line("RestartSec=5");
    line("# WATCHDOG=1 comes from the daemon's main loop at half this interval, and only");
    line("# after a round trip through the pipeline actor: a wedged daemon is restarted.");
    line("WatchdogSec=30");
    line("# KillMode=process: `systemctl stop` sends SIGTERM to the daemon alone; the daemon");
    line("# SIGTERMs the worker's process group, waits for its checkpoint, then exits. When");
    line("# the daemon crashes or trips the watchdog, systemd kills only the daemon: the");
    line("# worker (its own session, still in this cgroup) keeps training and the restarted");
    line("# daemon re-adopts it (pid + start time). control-group would SIGTERM the worker");
    line("# alongside the daemon on stop and kill it outright after a daemon crash; mixed");
    line("# would SIGKILL it as soon as the daemon is gone.");
    line("KillMode=process");
    line("# Delegate=yes: the cgroup subtree is the daemon's, to put each worker and all it");
    line("# starts in a cgroup of its own and end them together with cgroup.kill.");
    line("Delegate=yes");
    line(&format!(
        "# supervisor.stop_timeout_s ({} s) + {} s: the daemon SIGKILLs a worker that has not",
        spec.stop_timeout_s,
        super::spec::STOP_MARGIN_S
    ));
    line("# saved by then and exits first; EXTEND_TIMEOUT_USEC covers a larger timeout set later.");
    line(&format!(
        "TimeoutStopSec={}",
        spec.stop_timeout_with_margin()
    ));
    match &spec.run_as {
        Some(account) => line(&format!("User={}", specifiers(account))),
        None if !user => {
            line(
                "# No User=: the daemon and the worker run as root. `sudo lavenderd service install`",
            );
            line("# from your account, or --run-as USER, writes User= instead.");
        }
        None => {}
    }
    line(&format!(
        "WorkingDirectory={}",
        word(&path(spec, &spec.data_root))
    ));
    for (k, v) in &spec.env {
        let value = if k == "PATH" {
            v.split(':')
                .map(|d| path(spec, Path::new(d)))
                .collect::<Vec<_>>()
                .join(":")
        } else {
            specifiers(v)
        };
        line(&format!(
            "Environment={}",
            word(&format!("{}={value}", specifiers(k)))
        ));
    }
    line("# Hardening that still lets it work: only the data root (and state directory) is");
    line("# writable; the worker, a child, inherits all of this.");
    line("NoNewPrivileges=yes");
    line("ProtectSystem=strict");
    if !user {
        line("ProtectHome=read-only");
    }
    if spec
        .writable_paths()
        .iter()
        .any(|p| p.starts_with("/tmp") || p.starts_with("/var/tmp"))
    {
        line("# No PrivateTmp=: the data root is under /tmp, which it would hide.");
    } else {
        line("PrivateTmp=yes");
    }
    line(&format!("ReadWritePaths={}", mounts.join(" ")));
    if !user && let Some(dir) = state_directory(&spec.data_root) {
        line(&format!("StateDirectory={dir}"));
    }
    line("");
    line("[Install]");
    line(if user {
        "WantedBy=default.target"
    } else {
        "WantedBy=multi-user.target"
    });
    u
}

/// Where `install` writes the unit.
pub fn unit_path(spec: &ServiceSpec) -> std::path::PathBuf {
    match spec.scope {
        Scope::System => Path::new("/etc/systemd/system").join(UNIT_NAME),
        Scope::User => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .filter(|v| !v.is_empty())
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| spec.home.clone().unwrap_or_default().join(".config"));
            config.join("systemd/user").join(UNIT_NAME)
        }
    }
}

/// `systemctl` with `--user` for user units.
pub fn systemctl(spec: &ServiceSpec, args: &[&str]) -> Vec<String> {
    let mut cmd = vec!["systemctl".to_string()];
    if spec.scope == Scope::User {
        cmd.push("--user".into());
    }
    cmd.extend(args.iter().map(|a| a.to_string()));
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_when_needed() {
        assert_eq!(word("/usr/bin/lavenderd"), "/usr/bin/lavenderd");
        assert_eq!(word("/data/my runs"), "\"/data/my runs\"");
        assert_eq!(word("a\"b"), "\"a\\\"b\"");
        assert_eq!(arg("50%$HOME"), "50%%$$HOME");
    }

    #[test]
    fn state_directory_only_under_var_lib() {
        assert_eq!(
            state_directory(Path::new("/var/lib/lavender")).as_deref(),
            Some("lavender")
        );
        assert_eq!(state_directory(Path::new("/var/lib")), None);
        assert_eq!(state_directory(Path::new("/srv/lavender")), None);
    }

    #[test]
    fn unit_for_the_data_root_and_its_margins() {
        let spec = ServiceSpec {
            os: super::super::ServiceOs::Linux,
            scope: Scope::User,
            binary: "/home/ann/.cargo/bin/lavenderd".into(),
            data_root: "/home/ann/100% runs".into(),
            state_dir: "/home/ann/100% runs/state".into(),
            config_file: Some("/etc/lavender.yaml".into()),
            env: vec![("LAVENDER_LOG".into(), "info".into())],
            stop_timeout_s: 200,
            run_as: None,
            home: Some("/home/ann".into()),
        };
        let unit = render(&spec);
        assert!(
            unit.contains(
                "ExecStart=%h/.cargo/bin/lavenderd serve --data-root \"%h/100%% runs\" --config /etc/lavender.yaml\n"
            ),
            "{unit}"
        );
        assert!(unit.contains("TimeoutStopSec=230\n"), "{unit}");
        assert!(
            unit.contains("ReadWritePaths=\"%h/100%% runs\"\n"),
            "{unit}"
        );
        assert!(!unit.contains("ProtectHome"), "{unit}");
    }
}
