//! The macOS LaunchAgent (`~/Library/LaunchAgents/dev.lavender.lavenderd.plist`).

use std::path::PathBuf;

use super::spec::ServiceSpec;

pub const LABEL: &str = "dev.lavender.lavenderd";

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn string(indent: &str, s: &str) -> String {
    format!("{indent}<string>{}</string>\n", xml(s))
}

fn key(indent: &str, k: &str) -> String {
    format!("{indent}<key>{}</key>\n", xml(k))
}

pub fn render(spec: &ServiceSpec) -> String {
    let mut p = String::new();
    p.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    p.push_str("<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n");
    p.push_str(
        "<!--
  lavenderd as a macOS LaunchAgent, written by `lavenderd service install`; re-run it
  after moving the binary or changing the data root or config file. It starts at
  login and is restarted only after a failure. docs/OPERATIONS.md says how to
  operate the running pipeline.

  When a job exits, launchd kills the processes left in its process group. The worker
  runs in its own session and process group (setsid), so it is not in that group: a
  daemon crash leaves it training and the restarted daemon re-adopts it. Abandon-
  ProcessGroup covers anything else in the daemon's group. `launchctl bootout` sends
  the daemon SIGTERM; it stops the worker with a save, then exits. `lavenderd daemon
  restart` (SIGUSR2) restarts the daemon alone after an upgrade: it executes its
  binary again in place (same pid) and the worker keeps training.
-->
",
    );
    p.push_str("<plist version=\"1.0\">\n<dict>\n");
    p.push_str(&key("  ", "Label"));
    p.push_str(&string("  ", LABEL));
    p.push_str(&key("  ", "ProgramArguments"));
    p.push_str("  <array>\n");
    p.push_str(&string("    ", &spec.binary.display().to_string()));
    for a in spec.args() {
        p.push_str(&string("    ", &a));
    }
    p.push_str("  </array>\n");
    p.push_str(&key("  ", "WorkingDirectory"));
    p.push_str(&string("  ", &spec.data_root.display().to_string()));
    p.push_str(&key("  ", "RunAtLoad"));
    p.push_str("  <true/>\n");
    p.push_str(
        "  <!-- Restart after a crash (non-zero exit or signal), not after a clean stop. -->\n",
    );
    p.push_str(&key("  ", "KeepAlive"));
    p.push_str("  <dict>\n");
    p.push_str(&key("    ", "SuccessfulExit"));
    p.push_str("    <false/>\n  </dict>\n");
    p.push_str(&format!(
        "  <!-- supervisor.stop_timeout_s ({} s) + {} s; launchd's default of 20 s would\n       SIGKILL the daemon while the worker is still saving. -->\n",
        spec.stop_timeout_s,
        super::spec::STOP_MARGIN_S
    ));
    p.push_str(&key("  ", "ExitTimeOut"));
    p.push_str(&format!(
        "  <integer>{}</integer>\n",
        spec.stop_timeout_with_margin()
    ));
    p.push_str(&key("  ", "AbandonProcessGroup"));
    p.push_str("  <true/>\n");
    p.push_str("  <!-- Background would throttle CPU and I/O, and the worker inherits it. -->\n");
    p.push_str(&key("  ", "ProcessType"));
    p.push_str(&string("  ", "Standard"));
    let log = spec.daemon_log().display().to_string();
    p.push_str(&key("  ", "StandardOutPath"));
    p.push_str(&string("  ", &log));
    p.push_str(&key("  ", "StandardErrorPath"));
    p.push_str(&string("  ", &log));
    p.push_str(&key("  ", "EnvironmentVariables"));
    p.push_str("  <dict>\n");
    for (k, v) in &spec.env {
        p.push_str(&key("    ", k));
        p.push_str(&string("    ", v));
    }
    p.push_str("  </dict>\n</dict>\n</plist>\n");
    p
}

pub fn unit_path(spec: &ServiceSpec) -> PathBuf {
    spec.home
        .clone()
        .unwrap_or_default()
        .join("Library/LaunchAgents")
        .join(format!("{LABEL}.plist"))
}

/// `gui/<uid>`: the login session's launchd domain.
pub fn domain() -> String {
    format!("gui/{}", nix::unistd::getuid())
}

#[cfg(test)]
mod tests {
    #[test]
    fn xml_is_escaped() {
        assert_eq!(super::xml("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}
