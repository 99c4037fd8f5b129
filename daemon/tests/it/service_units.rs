//! The service units: `service install --print` for both OSes, `systemd-analyze
//! verify`, the plist read back by Python's plistlib, the checked-in units kept
//! equal to what the renderer writes, and install/status/uninstall against stand-in
//! `systemctl`/`loginctl` programs that record their arguments.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use lavender_testkit::*;
use lavenderd::service::{Scope, ServiceOs, ServiceSpec, render};
use serde_json::Value;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Paths that need not exist: `--print` writes nothing.
const DATA_ROOT: &str = "/srv/lavender-test/data";
const STATE_DIR: &str = "/srv/lavender-test/state";

/// `lavenderd --config <env's>` without the harness's `--data-root`.
fn lavenderd(env: &Env, home: &Path) -> Command {
    let mut c = Command::new(lavender_testkit::lavenderd());
    c.arg("--config")
        .arg(&env.config)
        .env_remove("LAVENDER_DATA_ROOT")
        .env_remove("LAVENDER_CONFIG")
        .env_remove("LAVENDER_SCALE")
        .env_remove("LAVENDER_CHUNK")
        .env_remove("LAVENDER_LOG")
        .env("HOME", home)
        .env_remove("SUDO_USER")
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::null());
    c
}

fn print_unit(env: &Env, home: &Path, extra: &[&str]) -> String {
    let out = lavenderd(env, home)
        .args(["--data-root", DATA_ROOT, "--state-dir", STATE_DIR])
        .args(["service", "install", "--print"])
        .args(extra)
        .env("LAVENDER_SCALE", "tiny")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

fn env_with_stop_timeout() -> Env {
    let env = Env::new(&[], "", "[train]");
    let yaml = std::fs::read_to_string(&env.config).unwrap();
    assert!(yaml.contains("stop_timeout_s: 10\n"));
    std::fs::write(
        &env.config,
        yaml.replace("stop_timeout_s: 10\n", "stop_timeout_s: 200\n"),
    )
    .unwrap();
    env
}

fn directive<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    let prefix = format!("{key}=");
    unit.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .collect()
}

fn systemd_analyze() -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/local/bin"] {
        let p = Path::new(dir).join("systemd-analyze");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "systemd-analyze is not installed, so the units cannot be verified. Install it with \
         `scripts/ci-deps.sh` (apt-get update && apt-get install -y systemd)"
    );
}

/// `systemd-analyze verify` exits 0 even on unknown keys or bad values, so any
/// diagnostic at all fails the test.
fn verify(unit: &str, user: bool, dir: &Path) {
    let unit_dir = dir.join(if user { "user" } else { "system" });
    std::fs::create_dir_all(&unit_dir).unwrap();
    let path = unit_dir.join("lavenderd.service");
    std::fs::write(&path, unit).unwrap();
    let runtime = dir.join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut cmd = Command::new(systemd_analyze());
    if user {
        cmd.arg("--user");
    }
    let out = cmd
        .arg("verify")
        .arg(&path)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("SYSTEMD_LOG_LEVEL", "notice")
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
        "systemd-analyze verify {} failed:\n{}{}\n--- unit ---\n{unit}",
        path.display(),
        stdout(&out),
        stderr(&out)
    );
}

/// A symlinked install (a versioned directory, Homebrew's `Cellar`): the unit names
/// the path lavenderd was run by, not the link's target, so an upgrade that swaps
/// the link keeps the unit valid and `lavenderd daemon restart` runs the new version.
#[test]
fn the_unit_names_the_path_lavenderd_was_run_by_not_its_target() {
    use std::os::unix::process::CommandExt as _;
    let env = Env::new(&[], "", "[train]");
    let home = env.dir.path().join("home");
    let link = env.dir.path().join("bin/lavenderd");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(lavender_testkit::lavenderd(), &link).unwrap();
    let out = lavenderd(&env, &home)
        .arg0(&link)
        .args(["--data-root", DATA_ROOT, "--state-dir", STATE_DIR])
        .args(["service", "install", "--print", "--os", "linux"])
        .env("LAVENDER_SCALE", "tiny")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let unit = stdout(&out);
    let exec = directive(&unit, "ExecStart");
    assert!(
        exec.len() == 1 && exec[0].starts_with(&format!("{} serve ", link.display())),
        "{unit}"
    );
}

#[test]
fn system_unit_has_what_the_issue_asks_and_passes_systemd_analyze_verify() {
    let env = env_with_stop_timeout();
    let home = env.dir.path().join("home");
    let unit = print_unit(&env, &home, &["--os", "linux", "--run-as", "lavender"]);
    let bin = std::fs::canonicalize(lavender_testkit::lavenderd()).unwrap();
    let config = env.config.display().to_string();

    assert_eq!(directive(&unit, "Type"), ["notify"]);
    assert_eq!(
        directive(&unit, "ExecStart"),
        [format!(
            "{} serve --data-root {DATA_ROOT} --state-dir {STATE_DIR} --config {config}",
            bin.display()
        )
        .as_str()]
    );
    assert_eq!(directive(&unit, "Restart"), ["on-failure"]);
    assert_eq!(directive(&unit, "WatchdogSec"), ["30"]);
    assert_eq!(directive(&unit, "KillMode"), ["process"]);
    assert_eq!(
        directive(&unit, "TimeoutStopSec"),
        ["230"],
        "stop_timeout_s 200 + 30"
    );
    assert_eq!(directive(&unit, "NoNewPrivileges"), ["yes"]);
    assert_eq!(directive(&unit, "ProtectSystem"), ["strict"]);
    assert_eq!(directive(&unit, "PrivateTmp"), ["yes"]);
    assert_eq!(
        directive(&unit, "ReadWritePaths"),
        [format!("{DATA_ROOT} {STATE_DIR}").as_str()]
    );
    assert_eq!(directive(&unit, "User"), ["lavender"]);
    let envs = directive(&unit, "Environment");
    assert!(envs.contains(&"LAVENDER_SCALE=tiny"), "{envs:?}");
    assert!(envs.contains(&"LAVENDER_LOG=info"), "{envs:?}");
    assert!(
        envs.iter()
            .any(|e| e.starts_with(&format!("PATH={}:", bin.parent().unwrap().display()))),
        "{envs:?}"
    );
    assert!(
        unit.contains("# KillMode=process: `systemctl stop` sends SIGTERM to the daemon alone"),
        "the unit explains its KillMode"
    );
    // verify checks that ExecStart's binary exists, so this unit names the real one.
    verify(&unit, false, env.dir.path());
}

#[test]
fn user_unit_passes_systemd_analyze_verify_and_writes_paths_under_home_as_specifiers() {
    let env = env_with_stop_timeout();
    let home = PathBuf::from("/srv/lavender-test");
    let unit = print_unit(&env, &home, &["--user", "--os", "linux"]);
    assert_eq!(
        directive(&unit, "ReadWritePaths"),
        ["%h/data %h/state"],
        "{unit}"
    );
    assert!(directive(&unit, "ExecStart")[0].contains("--data-root %h/data --state-dir %h/state"));
    assert!(
        directive(&unit, "User").is_empty(),
        "a user unit runs as its user"
    );
    assert!(directive(&unit, "ProtectHome").is_empty(), "{unit}");
    assert_eq!(directive(&unit, "WantedBy"), ["default.target"]);
    verify(&unit, true, env.dir.path());
}

#[test]
fn launchd_plist_parses_with_plistlib_and_has_the_keys_and_timeouts() {
    let env = env_with_stop_timeout();
    let home = env.dir.path().join("home");
    let plist = print_unit(&env, &home, &["--os", "macos"]);
    let path = env.dir.path().join("agent.plist");
    std::fs::write(&path, &plist).unwrap();
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, plistlib, sys; print(json.dumps(plistlib.load(open(sys.argv[1], 'rb'))))",
        ])
        .arg(&path)
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "plistlib: {}\n{plist}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bin = std::fs::canonicalize(lavender_testkit::lavenderd()).unwrap();
    assert_eq!(v["Label"], "dev.lavender.lavenderd");
    let args: Vec<&str> = v["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let config = env.config.display().to_string();
    assert_eq!(
        args,
        [
            bin.to_str().unwrap(),
            "serve",
            "--data-root",
            DATA_ROOT,
            "--state-dir",
            STATE_DIR,
            "--config",
            &config
        ]
    );
    assert_eq!(v["RunAtLoad"], true);
    assert_eq!(
        v["KeepAlive"],
        serde_json::json!({"SuccessfulExit": false}),
        "restart only on failure"
    );
    assert!(
        v["ExitTimeOut"].as_u64().unwrap() >= 230,
        "stop grace 200 + 30: {}",
        v["ExitTimeOut"]
    );
    assert_eq!(v["StandardOutPath"], format!("{STATE_DIR}/lavenderd.log"));
    assert_eq!(v["StandardErrorPath"], format!("{STATE_DIR}/lavenderd.log"));
    assert_eq!(v["AbandonProcessGroup"], true);
    assert_ne!(v["ProcessType"], "Background", "would throttle the worker");
    assert_eq!(v["EnvironmentVariables"]["LAVENDER_SCALE"], "tiny");
    assert_eq!(v["EnvironmentVariables"]["LAVENDER_LOG"], "info");
    assert!(v["EnvironmentVariables"]["PATH"].is_string());
}

#[test]
fn installing_for_another_os_is_refused_with_a_pointer_to_print() {
    let env = env_with_stop_timeout();
    let other = if cfg!(target_os = "macos") {
        "linux"
    } else {
        "macos"
    };
    let out = lavenderd(&env, env.dir.path())
        .args(["service", "install", "--os", other])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("--os {other} --print")),
        "{}",
        stderr(&out)
    );
}

/// The example units in the repository are what the renderer writes for the
/// default paths; `LAVENDER_UPDATE_UNITS=1 cargo test -p lavenderd --test it --
/// service_units` rewrites them after a change to the renderer. Each file is compared
/// before it is rewritten, and a run that rewrote one fails, so the variable never
/// turns a stale unit into a pass.
#[test]
fn checked_in_units_are_what_install_writes_for_the_default_paths() {
    let path = |first: &str| {
        format!("{first}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin").replace(
            "/usr/local/bin:/usr/local/sbin:/usr/local/bin:",
            "/usr/local/bin:/usr/local/sbin:",
        )
    };
    let base = ServiceSpec {
        os: ServiceOs::Linux,
        scope: Scope::System,
        binary: "/usr/local/bin/lavenderd".into(),
        data_root: "/var/lib/lavender".into(),
        state_dir: "/var/lib/lavender/state".into(),
        config_file: None,
        env: vec![
            ("PATH".into(), path("/usr/local/bin")),
            ("LAVENDER_LOG".into(), "info".into()),
        ],
        stop_timeout_s: 120,
        run_as: None,
        home: None,
    };
    let user = ServiceSpec {
        scope: Scope::User,
        binary: "/home/you/.cargo/bin/lavenderd".into(),
        data_root: "/home/you/lavender-data".into(),
        state_dir: "/home/you/lavender-data/state".into(),
        env: vec![
            ("PATH".into(), path("/home/you/.cargo/bin")),
            ("LAVENDER_LOG".into(), "info".into()),
        ],
        home: Some("/home/you".into()),
        ..base.clone()
    };
    let mac = ServiceSpec {
        os: ServiceOs::Macos,
        binary: "/Users/you/.cargo/bin/lavenderd".into(),
        data_root: "/Users/you/lavender-data".into(),
        state_dir: "/Users/you/lavender-data/state".into(),
        env: vec![
            ("PATH".into(), path("/Users/you/.cargo/bin")),
            ("LAVENDER_LOG".into(), "info".into()),
        ],
        home: Some("/Users/you".into()),
        ..user.clone()
    };
    let update = std::env::var_os("LAVENDER_UPDATE_UNITS").is_some();
    let mut stale = Vec::new();
    for (file, spec) in [
        ("systemd/lavenderd.service", &base),
        ("systemd/lavenderd-user.service", &user),
        ("launchd/dev.lavender.lavenderd.plist", &mac),
    ] {
        let path = Path::new(REPO).join(file);
        let want = render(spec);
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            if update {
                std::fs::write(&path, &want).unwrap();
            }
            stale.push(format!("{file}\n--- renderer ---\n{want}"));
        }
    }
    let fix = if update {
        "rewritten now (LAVENDER_UPDATE_UNITS is set); review the diff and run again without it"
    } else {
        "run LAVENDER_UPDATE_UNITS=1 cargo test -p lavenderd --test it -- service_units"
    };
    assert!(
        stale.is_empty(),
        "not what the renderer writes ({fix}):\n{}",
        stale.join("\n")
    );
}

/// Stand-ins for systemctl and loginctl: they append their arguments to a file and
/// exit with `$FAKE_SYSTEMCTL_EXIT` (default 0).
fn fake_managers(dir: &Path) -> (PathBuf, PathBuf) {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("manager-calls.txt");
    for name in ["systemctl", "loginctl"] {
        let p = bin.join(name);
        lavender_testkit::write_executable(
            &p,
            &format!(
                "#!/bin/sh\necho \"{name} $*\" >> '{}'\nexit ${{FAKE_SYSTEMCTL_EXIT:-0}}\n",
                log.display()
            ),
        );
    }
    (bin, log)
}

struct UserInstall {
    env: Env,
    home: PathBuf,
    config_home: PathBuf,
    path_var: String,
    calls: PathBuf,
}

impl UserInstall {
    fn new() -> UserInstall {
        let env = env_with_stop_timeout();
        let home = env.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let (bin, calls) = fake_managers(env.dir.path());
        UserInstall {
            config_home: env.dir.path().join("config"),
            path_var: format!("{}:/usr/bin:/bin", bin.display()),
            home,
            calls,
            env,
        }
    }

    fn run(&self, args: &[&str], exit: &str) -> Output {
        lavenderd(&self.env, &self.home)
            .env("XDG_CONFIG_HOME", &self.config_home)
            .env("PATH", &self.path_var)
            .env("FAKE_SYSTEMCTL_EXIT", exit)
            .arg("--data-root")
            .arg(&self.env.data_root)
            .args(["service"])
            .args(args)
            .output()
            .unwrap()
    }

    fn unit(&self) -> PathBuf {
        self.config_home.join("systemd/user/lavenderd.service")
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn printed(&self) -> String {
        let out = self.run(&["install", "--user", "--print"], "0");
        assert!(out.status.success());
        stdout(&out)
    }
}

fn whoami() -> String {
    String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn user_install_writes_the_unit_enables_it_and_status_and_uninstall_follow() {
    let t = UserInstall::new();
    let out = t.run(&["install", "--user"], "0");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(std::fs::read_to_string(t.unit()).unwrap(), t.printed());
    assert!(
        t.env.state_dir().is_dir(),
        "install creates the data root and state dir"
    );
    assert_eq!(
        t.calls(),
        [
            "systemctl --user daemon-reload".to_string(),
            "systemctl --user enable --now lavenderd.service".to_string(),
            format!("loginctl enable-linger {}", whoami()),
        ]
    );

    let out = t.run(&["status", "--user"], "0");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("(current)"), "{text}");
    assert!(text.contains("daemon: not answering"), "{text}");
    assert!(
        t.calls()
            .last()
            .unwrap()
            .contains("systemctl --user status --no-pager lavenderd.service")
    );

    // A unit from an older install (another stop timeout, say) is reported.
    let old = std::fs::read_to_string(t.unit()).unwrap();
    std::fs::write(
        t.unit(),
        old.replace("TimeoutStopSec=230", "TimeoutStopSec=150"),
    )
    .unwrap();
    let text = stdout(&t.run(&["status", "--user"], "0"));
    assert!(
        text.contains("differs from what `lavenderd service install` would write"),
        "{text}"
    );

    // Uninstalling asks first: without a terminal it needs --yes, and nothing is run.
    let before = t.calls().len();
    let out = t.run(&["uninstall", "--user"], "0");
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    // The data root it read, then the one line that says what --yes would do.
    let lines: Vec<&str> = err.trim().lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with("data root: "), "{err}");
    assert!(err.contains("--yes"), "{err}");
    assert!(t.unit().exists());
    assert_eq!(
        t.calls().len(),
        before,
        "no service-manager call without a yes"
    );
    let out = t.run(&["uninstall", "--user", "--yes"], "0");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!t.unit().exists());
    assert_eq!(
        t.calls()[before..],
        [
            "systemctl --user disable --now lavenderd.service".to_string(),
            "systemctl --user daemon-reload".to_string()
        ]
    );
    let out = t.run(&["status", "--user"], "0");
    assert_eq!(out.status.code(), Some(3), "not installed");
}

#[test]
fn install_prints_the_remaining_commands_when_systemctl_fails() {
    let t = UserInstall::new();
    let out = t.run(&["install", "--user"], "1");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`systemctl --user daemon-reload` failed"),
        "{}",
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(
        text.contains("  systemctl --user daemon-reload\n"),
        "{text}"
    );
    assert!(
        text.contains("  systemctl --user enable --now lavenderd.service\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("  loginctl enable-linger {}\n", whoami())),
        "{text}"
    );
}

#[test]
fn install_prints_the_commands_when_the_unit_cannot_be_written() {
    let t = UserInstall::new();
    // A file where the config directory should be: the unit cannot be written.
    std::fs::write(&t.config_home, "").unwrap();
    let out = t.run(&["install", "--user"], "0");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let staged = t.env.state_dir().join("lavenderd.service");
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "  install -D -m 0644 {} {}\n",
            staged.display(),
            t.unit().display()
        )),
        "{text}"
    );
    assert!(
        text.contains("  systemctl --user enable --now lavenderd.service\n"),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(&staged).unwrap(), t.printed());
    assert!(t.calls().is_empty(), "nothing ran after the failed write");
}

#[test]
fn install_next_to_a_hand_started_daemon_says_how_to_hand_the_worker_over() {
    let mut t = UserInstall::new();
    let pid = t.env.serve();
    let out = t.run(&["install", "--user"], "0");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("`kill -KILL {pid}` hands a running worker over")),
        "{}",
        stderr(&out)
    );
    // Once the unit exists, the daemon answering is taken to be the service's own.
    let out = t.run(&["install", "--user"], "0");
    assert!(!stderr(&out).contains("kill -KILL"), "{}", stderr(&out));
}
