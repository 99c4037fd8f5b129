//! An outside tool run with a deadline: its output kept (bounded), a missing tool
//! or one that overran said, never an error.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a tool's run went, as the bundle's index says it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Ran {
    Ok,
    /// Ended with a failure status; its output (stderr too) is kept.
    Failed {
        status: String,
    },
    /// Killed at its deadline.
    TimedOut {
        after_s: f64,
    },
    /// Not installed (or not found where looked).
    Missing {
        looked: String,
    },
}

/// Where `name` is: an executable in one of `dirs`, else on `PATH`.
pub fn find(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    dirs.iter()
        .cloned()
        .chain(std::env::split_paths(&path))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `program args` for at most `timeout`; its stdout then stderr, the first
/// `limit` bytes of each.
pub fn run(program: &Path, args: &[String], timeout: Duration, limit: usize) -> (Ran, Vec<u8>) {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return (
                Ran::Missing {
                    looked: format!("{}: {e}", program.display()),
                },
                Vec::new(),
            );
        }
    };
    // Readers on their own threads: a tool filling its pipe never blocks its exit.
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.by_ref().take(limit as u64).read_to_end(&mut buf);
            // Drain the rest so the tool is not stuck writing it.
            let _ = std::io::copy(&mut r, &mut std::io::sink());
            buf
        })
    };
    let out = child.stdout.take().map(|o| reader(Box::new(o)));
    let err = child.stderr.take().map(|e| reader(Box::new(e)));
    let started = Instant::now();
    let ran = loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break Ran::Ok,
            Ok(Some(status)) => {
                break Ran::Failed {
                    status: status.to_string(),
                };
            }
            Ok(None) if started.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break Ran::TimedOut {
                    after_s: started.elapsed().as_secs_f64(),
                };
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => {
                break Ran::Failed {
                    status: e.to_string(),
                };
            }
        }
    };
    let mut bytes = out.and_then(|t| t.join().ok()).unwrap_or_default();
    let err = err.and_then(|t| t.join().ok()).unwrap_or_default();
    if !err.is_empty() {
        bytes.extend_from_slice(b"\n--- stderr ---\n");
        bytes.extend_from_slice(&err);
    }
    (ran, bytes)
}
