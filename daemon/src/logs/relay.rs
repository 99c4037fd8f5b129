//! Who writes a pipeline log: a relay process between the worker and the file.
//!
//! The worker's stdout and stderr are a pipe; `lavenderd log-relay` reads the other
//! end and appends to the log through a [`RotatingFile`], so the log rotates by size
//! however long the run. The relay leaves the daemon at once (it forks, and its parent
//! exits) into a session of its own: a daemon that crashes, restarts alone or is
//! killed does not take it along, so a worker that outlives the daemon keeps logging,
//! and rotating, into the same file; the next daemon finds the log where the record
//! says. The relay ignores SIGTERM, SIGINT and SIGHUP: it ends when its input does,
//! once the worker and everything it started have closed their output. Were the relay
//! killed, the worker's writes would fail: it is left alone by every stop.

use std::io::{self, Read, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result, bail};
use lavender::config::LoggingConfig;

use super::rotating::RotatingFile;

/// The relay's side: called by `main` before anything else runs (no threads yet, so
/// forking is safe). Returns only in the parent, which exits at once.
pub fn run(file: &Path, limits: LoggingConfig) -> ExitCode {
    use nix::unistd::{ForkResult, fork, setsid};
    // SAFETY: the process is single-threaded here (no runtime, no logging threads).
    match unsafe { fork() } {
        Ok(ForkResult::Parent { .. }) => return ExitCode::SUCCESS,
        Ok(ForkResult::Child) => {}
        Err(e) => {
            eprintln!("lavenderd log-relay: fork: {e}");
            return ExitCode::FAILURE;
        }
    }
    let _ = setsid();
    ignore_stop_signals();
    relay(&mut io::stdin().lock(), file, limits);
    // The parent already answered; the relay's end is the end of its input.
    std::process::exit(0)
}

fn ignore_stop_signals() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGPIPE,
    ] {
        // SAFETY: installing SIG_IGN runs no handler code.
        let _ = unsafe { signal(s, SigHandler::SigIgn) };
    }
}

/// Copies `input` to the log until it ends. A log that cannot be written (a full
/// disk) drops what comes meanwhile rather than stall the worker, and is tried again
/// with the next output.
pub fn relay(input: &mut impl Read, file: &Path, limits: LoggingConfig) {
    let mut log = RotatingFile::open(file, limits).ok();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if log.is_none() {
            log = RotatingFile::open(file, limits).ok();
        }
        if let Some(l) = log.as_mut()
            && l.append(&buf[..n]).is_err()
        {
            log = None;
        }
    }
}

/// The daemon's side: starts a relay from `output` (the read end of the worker's
/// pipe) to `log_file`; returns once the relay has left the daemon's process tree.
pub fn start(log_file: &Path, limits: LoggingConfig, output: io::PipeReader) -> Result<()> {
    let exe = crate::exe::invoked_exe()?;
    let status = Command::new(&exe)
        .arg("log-relay")
        .arg("--file")
        .arg(log_file)
        .args(["--max-bytes", &limits.max_bytes.to_string()])
        .args(["--keep", &limits.keep.to_string()])
        .stdin(Stdio::from(output))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("start the log relay ({} log-relay)", exe.display()))?;
    if !status.success() {
        bail!(
            "the log relay ({} log-relay) failed: {status}",
            exe.display()
        );
    }
    Ok(())
}

/// The worker's stdout and stderr, and the daemon's own write end of the same pipe
/// (for the story, `story.rs`): a pipe to a relay into `log_file`, whose first line
/// is `header`. When no relay can start, the file itself (appended to, not rotated),
/// with a warning, and no write end for the daemon.
pub fn worker_output(
    log_file: &Path,
    limits: LoggingConfig,
    header: &str,
) -> Result<(Stdio, Stdio, Option<io::PipeWriter>)> {
    let via_relay = || -> Result<(Stdio, Stdio, Option<io::PipeWriter>)> {
        let (reader, mut writer) = io::pipe().context("create the worker's output pipe")?;
        // Held in the pipe until the relay reads it: the log's first line.
        writer.write_all(header.as_bytes())?;
        start(log_file, limits, reader)?;
        let err = writer.try_clone()?;
        let story = writer.try_clone()?;
        Ok((Stdio::from(writer), Stdio::from(err), Some(story)))
    };
    match via_relay() {
        Ok(out) => Ok(out),
        Err(e) => {
            tracing::warn!(
                "{e:#}; the worker writes {} directly, which will not rotate",
                log_file.display()
            );
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log_file)
                .with_context(|| format!("open worker log {}", log_file.display()))?;
            log.write_all(header.as_bytes())
                .with_context(|| format!("write to {}", log_file.display()))?;
            let err = log
                .try_clone()
                .with_context(|| format!("duplicate handle of {}", log_file.display()))?;
            Ok((Stdio::from(log), Stdio::from(err), None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_copies_its_input_into_a_rotating_log_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/pipeline_chunk1_x.log");
        let text: String = (0..300).map(|i| format!("worker line {i:04}\n")).collect();
        let limits = LoggingConfig {
            max_bytes: 1024,
            keep: 10,
        };
        relay(&mut text.as_bytes(), &path, limits);
        let mut kept = String::new();
        for k in (1..=10).rev() {
            kept.push_str(
                &std::fs::read_to_string(super::super::rotating::rotated(&path, k))
                    .unwrap_or_default(),
            );
        }
        kept.push_str(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(kept, text);
        assert!(super::super::rotating::rotated(&path, 4).exists());
    }
}
