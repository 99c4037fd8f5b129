//! Alert texts for the supervisor's faults and the run's end: stalled, recovered,
//! crashed, restarting, failed, disk low, finished.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::format::{bytes, duration, thousands};
use super::message::Notification;

/// How the worker process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    Code(i32),
    Signal(i32),
}

impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ExitReason::Code(code) => write!(f, "exit code {code}"),
            ExitReason::Signal(sig) => match signal_name(sig) {
                Some(name) => write!(f, "killed by {name} (signal {sig})"),
                None => write!(f, "killed by signal {sig}"),
            },
        }
    }
}

/// Names of the signals that end training processes in practice.
fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 if cfg!(target_os = "linux") => "SIGBUS",
        10 if cfg!(target_os = "macos") => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// What the supervisor alerts about.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertKind {
    /// The heartbeat is older than `stale_after_s` (after the start-up grace).
    Stalled {
        heartbeat_age: Duration,
        stale_after_s: u64,
        step: Option<u64>,
    },
    /// A fresh heartbeat after a stall.
    Recovered {
        stalled_for: Option<Duration>,
        step: Option<u64>,
    },
    /// The worker died; `log_tail` is the end of its log (see [`log_tail`]).
    Crashed {
        exit: ExitReason,
        log_tail: Vec<String>,
    },
    /// Restart `attempt` of `max`, after `delay`.
    Restarting {
        attempt: u32,
        max: u32,
        delay: Duration,
    },
    /// Restarts exhausted; the pipeline is marked failed.
    Failed {
        restarts: u32,
        last_exit: Option<ExitReason>,
    },
    /// Free space under `need_bytes` (see [`disk_low_need`]).
    DiskLow {
        path: PathBuf,
        avail_bytes: u64,
        need_bytes: u64,
    },
    /// The pipeline finished.
    Finished {
        duration: Duration,
        final_loss: Option<f64>,
        final_checkpoint: Option<String>,
    },
}

impl AlertKind {
    /// The kind name: `Notification::kind`, the key alerts coalesce by.
    pub fn name(&self) -> &'static str {
        match self {
            AlertKind::Stalled { .. } => "stalled",
            AlertKind::Recovered { .. } => "recovered",
            AlertKind::Crashed { .. } => "crashed",
            AlertKind::Restarting { .. } => "restarting",
            AlertKind::Failed { .. } => "failed",
            AlertKind::DiskLow { .. } => "disk_low",
            AlertKind::Finished { .. } => "finished",
        }
    }
}

fn step_text(step: Option<u64>) -> String {
    step.map(|s| format!("; last step {}", thousands(s)))
        .unwrap_or_default()
}

/// The push for an alert, its title starting with `prefix`.
pub fn alert(kind: AlertKind, prefix: &str) -> Notification {
    let name = kind.name();
    let (title, body) = match kind {
        AlertKind::Stalled {
            heartbeat_age,
            stale_after_s,
            step,
        } => (
            format!("stalled: no heartbeat for {}", duration(heartbeat_age)),
            format!(
                "the worker's heartbeat is older than {stale_after_s} s{}",
                step_text(step)
            ),
        ),
        AlertKind::Recovered { stalled_for, step } => (
            "recovered: heartbeat is fresh again".to_string(),
            match stalled_for {
                Some(d) => format!("stalled for {}{}", duration(d), step_text(step)),
                None => step_text(step).trim_start_matches("; ").to_string(),
            },
        ),
        AlertKind::Crashed { exit, log_tail } => (
            format!("crashed: {exit}"),
            if log_tail.is_empty() {
                "(the worker log is empty)".to_string()
            } else {
                log_tail.join("\n")
            },
        ),
        AlertKind::Restarting {
            attempt,
            max,
            delay,
        } => (
            format!("restarting: attempt {attempt} of {max}"),
            format!("resuming from the latest checkpoint in {}", duration(delay)),
        ),
        AlertKind::Failed {
            restarts,
            last_exit,
        } => (
            format!(
                "failed: gave up after {restarts} restart{}",
                if restarts == 1 { "" } else { "s" }
            ),
            match last_exit {
                Some(exit) => {
                    format!("last {exit}; the pipeline is stopped until you start it again")
                }
                None => "the pipeline is stopped until you start it again".to_string(),
            },
        ),
        AlertKind::DiskLow {
            path,
            avail_bytes,
            need_bytes,
        } => (
            format!(
                "disk low: {} free, need {}",
                bytes(avail_bytes),
                bytes(need_bytes)
            ),
            format!(
                "on {}; the next checkpoint may not fit. Free space or lower training.keep_checkpoints",
                path.display()
            ),
        ),
        AlertKind::Finished {
            duration: took,
            final_loss,
            final_checkpoint,
        } => {
            let mut parts = Vec::new();
            if let Some(loss) = final_loss.filter(|l| l.is_finite()) {
                parts.push(format!("final loss {loss:.3}"));
            }
            if let Some(name) = final_checkpoint {
                parts.push(format!("final checkpoint {name}"));
            }
            (format!("finished in {}", duration(took)), parts.join(", "))
        }
    };
    Notification::alert(name, format!("{prefix}{title}"), body)
}

/// The free space a run needs: max(2 × the last checkpoint's size, the floor).
pub fn disk_low_need(last_checkpoint_bytes: Option<u64>, floor_mib: u64) -> u64 {
    let floor = floor_mib.saturating_mul(1024 * 1024);
    last_checkpoint_bytes
        .map_or(0, |b| b.saturating_mul(2))
        .max(floor)
}

/// The last `n` non-empty lines of a log, reading at most its last 64 KiB. A log
/// that cannot be read gives no lines: the alert says so instead of failing.
pub fn log_tail(path: &Path, n: usize) -> Vec<String> {
    const MAX: u64 = 64 * 1024;
    let read = || -> std::io::Result<Vec<u8>> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(MAX)))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(buf)
    };
    let Ok(buf) = read() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<String> = text
        .lines()
        .rev()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .take(n)
        .map(str::to_string)
        .collect();
    lines.reverse();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "[lavender] ";

    #[test]
    fn alert_texts() {
        let n = alert(
            AlertKind::Crashed {
                exit: ExitReason::Code(1),
                log_tail: vec!["step 40 loss 2.1".into(), "RuntimeError: CUDA OOM".into()],
            },
            P,
        );
        assert_eq!(n.kind, "crashed");
        assert_eq!(n.title, "[lavender] crashed: exit code 1");
        assert_eq!(n.body, "step 40 loss 2.1\nRuntimeError: CUDA OOM");
        let n = alert(
            AlertKind::Crashed {
                exit: ExitReason::Signal(9),
                log_tail: vec![],
            },
            P,
        );
        assert_eq!(n.title, "[lavender] crashed: killed by SIGKILL (signal 9)");

        let n = alert(
            AlertKind::Stalled {
                heartbeat_age: Duration::from_secs(372),
                stale_after_s: 300,
                step: Some(1234),
            },
            P,
        );
        assert_eq!(n.title, "[lavender] stalled: no heartbeat for 6m 12s");
        assert_eq!(
            n.body,
            "the worker's heartbeat is older than 300 s; last step 1,234"
        );

        let n = alert(
            AlertKind::Recovered {
                stalled_for: Some(Duration::from_secs(400)),
                step: Some(1300),
            },
            P,
        );
        assert_eq!(n.body, "stalled for 6m 40s; last step 1,300");

        let n = alert(
            AlertKind::Restarting {
                attempt: 2,
                max: 3,
                delay: Duration::from_secs(30),
            },
            P,
        );
        assert_eq!(n.title, "[lavender] restarting: attempt 2 of 3");

        let n = alert(
            AlertKind::Failed {
                restarts: 3,
                last_exit: Some(ExitReason::Code(137)),
            },
            P,
        );
        assert_eq!(n.title, "[lavender] failed: gave up after 3 restarts");
        assert!(n.body.starts_with("last exit code 137"), "{}", n.body);

        let n = alert(
            AlertKind::DiskLow {
                path: "/data".into(),
                avail_bytes: 1288490189,
                need_bytes: 2 * 1288490189,
            },
            P,
        );
        assert_eq!(n.title, "[lavender] disk low: 1.2 GiB free, need 2.4 GiB");

        let n = alert(
            AlertKind::Finished {
                duration: Duration::from_secs(3 * 3600 + 720),
                final_loss: Some(1.23456),
                final_checkpoint: Some("final-05-12-22-0007".into()),
            },
            P,
        );
        assert_eq!(n.title, "[lavender] finished in 3h 12m");
        assert_eq!(
            n.body,
            "final loss 1.235, final checkpoint final-05-12-22-0007"
        );
    }

    #[test]
    fn disk_need_is_twice_the_checkpoint_or_the_floor() {
        const MIB: u64 = 1024 * 1024;
        assert_eq!(disk_low_need(None, 1024), 1024 * MIB);
        assert_eq!(disk_low_need(Some(100 * MIB), 1024), 1024 * MIB);
        assert_eq!(disk_low_need(Some(700 * MIB), 1024), 1400 * MIB);
    }

    #[test]
    fn log_tail_reads_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("w.log");
        let text: String = (1..=50).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, format!("{text}\n\n")).unwrap();
        assert_eq!(log_tail(&log, 3), ["line 48", "line 49", "line 50"]);
        assert!(log_tail(&dir.path().join("missing.log"), 3).is_empty());
    }
}
