//! Desktop notifications: `notify-send` on Linux (in a desktop session),
//! `osascript` on macOS. Milestones are low urgency; alerts critical / with sound.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use super::delivery::{self, DeliveryError};
use super::message::{Level, Notification};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    NotifySend,
    Osascript,
}

pub(super) struct Desktop {
    program: PathBuf,
    style: Style,
}

/// `name` on `PATH`, if there.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// An AppleScript string literal.
fn applescript_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

impl Desktop {
    /// The platform's notifier, or why there is none.
    pub fn detect() -> Result<Desktop, String> {
        if cfg!(target_os = "macos") {
            let program = which("osascript").ok_or("osascript is not on PATH")?;
            return Ok(Desktop {
                program,
                style: Style::Osascript,
            });
        }
        // A daemon without a desktop session (a server, a system service) has no one
        // to show a notification to; notify-send would only fail.
        let session = ["DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
        if !session {
            return Err(
                "no desktop session (DBUS_SESSION_BUS_ADDRESS, DISPLAY, WAYLAND_DISPLAY unset)"
                    .into(),
            );
        }
        let program =
            which("notify-send").ok_or("notify-send is not on PATH (install libnotify-bin)")?;
        Ok(Desktop {
            program,
            style: Style::NotifySend,
        })
    }

    /// A given program called like `notify-send`.
    pub fn with_program(program: &Path) -> Desktop {
        Desktop {
            program: program.to_path_buf(),
            style: Style::NotifySend,
        }
    }

    fn args(&self, n: &Notification) -> Vec<String> {
        let (summary, body) = if n.title.is_empty() {
            ("lavender".to_string(), n.body.clone())
        } else {
            (n.title.clone(), n.body.clone())
        };
        match self.style {
            Style::NotifySend => vec![
                "--app-name=lavender".into(),
                format!(
                    "--urgency={}",
                    match n.level {
                        Level::Milestone => "low",
                        Level::Alert => "critical",
                    }
                ),
                "--".into(),
                summary,
                body,
            ],
            Style::Osascript => {
                let sound = match n.level {
                    Level::Milestone => "",
                    Level::Alert => " sound name \"default\"",
                };
                vec![
                    "-e".into(),
                    format!(
                        "display notification {} with title {}{sound}",
                        applescript_string(&body),
                        applescript_string(&summary)
                    ),
                ]
            }
        }
    }

    pub async fn deliver(&self, n: &Notification) -> Result<String, DeliveryError> {
        let output = Command::new(&self.program)
            .args(self.args(n))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| {
                DeliveryError::fatal(format!("cannot run {}: {e}", self.program.display()))
            })?;
        let name = self.program.display();
        if output.status.success() {
            let out = String::from_utf8_lossy(&output.stdout);
            Ok(if out.trim().is_empty() {
                format!("{name} exited 0")
            } else {
                delivery::clip(&out, 300)
            })
        } else {
            Err(DeliveryError::retry(format!(
                "{name} failed ({}): {}",
                output.status,
                delivery::clip(&String::from_utf8_lossy(&output.stderr), 300)
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn osascript_quotes() {
        let d = Desktop {
            program: "osascript".into(),
            style: Style::Osascript,
        };
        let args = d.args(&Notification::alert("x", "say \"hi\"", "a\\b"));
        assert_eq!(
            args[1],
            r#"display notification "a\\b" with title "say \"hi\"" sound name "default""#
        );
    }
}
