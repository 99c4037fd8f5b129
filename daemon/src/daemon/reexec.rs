//! Restarting the daemon alone (`lavenderd daemon restart`, or SIGUSR2), for an
//! upgrade in the middle of a days-long run. The daemon stops serving, lets the
//! pipeline actor finish its current transition (so `state/pipeline.json` is
//! current), and re-executes its own binary in place: the pid stays, so a service
//! manager sees no restart and the worker stays its child; the new image takes the
//! instance lock again and re-adopts the worker from the record, as after a crash.
//! SIGTERM (`systemctl stop`, `systemctl restart`) still stops the pipeline with a save.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

use anyhow::{Result, anyhow};

use crate::exe::invoked_exe;

/// What to execute again: taken at start-up, before an upgrade can replace the file.
#[derive(Debug, Clone)]
pub struct Reexec {
    exe: PathBuf,
    args: Vec<OsString>,
}

impl Reexec {
    /// The path this binary was started by (an upgrade that replaces the file, or
    /// the symlink, there makes the restart run the new version) and this process's
    /// arguments.
    pub fn capture() -> Result<Reexec> {
        Ok(Reexec {
            exe: invoked_exe()?,
            args: std::env::args_os().collect(),
        })
    }

    /// Replaces this process with a fresh daemon; returns only when that failed.
    /// Every descriptor the daemon opened is close-on-exec (the instance lock, the
    /// listeners), so the new image starts as on a first start.
    pub fn exec(&self) -> anyhow::Error {
        if !self.exe.is_file() {
            return anyhow!(
                "cannot restart the daemon: {} is gone; reinstall lavenderd there, or stop and start the service",
                self.exe.display()
            );
        }
        let mut cmd = std::process::Command::new(&self.exe);
        if let Some((arg0, rest)) = self.args.split_first() {
            cmd.arg0(arg0).args(rest);
        }
        let err = cmd.exec();
        anyhow!(
            "cannot restart the daemon: execute {}: {err}; the worker keeps training, and a new `lavenderd serve` re-adopts it",
            self.exe.display()
        )
    }
}
