//! Restarting the daemon alone (`lavenderd daemon restart`, or SIGUSR2), for an
//! upgrade in the middle of a days-long run. The daemon stops serving, lets the
//! pipeline actor finish its current transition (so `state/pipeline.json` is
//! current), and re-executes its own binary in place: the pid stays, so a service
//! manager sees no restart and the worker stays its child; the new image takes the
//! instance lock again and re-adopts the worker from the record, as after a crash.
//! SIGTERM (`systemctl stop`, `systemctl restart`) still stops the pipeline with a save.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};

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

/// The lavenderd executable as it was started: `argv[0]` as a path (what the
/// service's `ExecStart=` or `ProgramArguments` names, or a name found on `PATH`),
/// made absolute, not resolved through symlinks. An upgrade often swaps a symlink
/// (`/usr/local/bin/lavenderd` → a versioned directory, Homebrew's `Cellar`) and
/// removes the old version: `current_exe` names the old target, so it is only the
/// fallback, when `argv[0]` names no file.
pub(crate) fn invoked_exe() -> Result<PathBuf> {
    let arg0 = std::env::args_os().next().unwrap_or_default();
    let path = std::env::var_os("PATH").unwrap_or_default();
    match invoked_path(&arg0, &path) {
        Some(exe) => Ok(exe),
        None => std::env::current_exe().context("find the lavenderd executable"),
    }
}

fn invoked_path(arg0: &OsStr, path_var: &OsStr) -> Option<PathBuf> {
    let arg0 = Path::new(arg0);
    if arg0.as_os_str().is_empty() {
        return None;
    }
    let found = if arg0.components().count() > 1 {
        std::path::absolute(arg0).ok()?
    } else {
        std::env::split_paths(path_var)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(arg0))
            .find(|candidate| candidate.is_file())?
    };
    found.is_file().then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_invoked_path_is_kept_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = dir.path().join("v1/lavenderd");
        std::fs::create_dir_all(v1.parent().unwrap()).unwrap();
        std::fs::write(&v1, "").unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(&v1, bin.join("lavenderd")).unwrap();
        let linked = bin.join("lavenderd");

        // A path (ExecStart=, ProgramArguments): as given, the symlink not followed.
        assert_eq!(
            invoked_path(linked.as_os_str(), OsStr::new("")),
            Some(linked.clone())
        );
        // A bare name: the first match on PATH, skipping relative entries.
        let path = std::env::join_paths([Path::new("rel"), dir.path(), &bin]).unwrap();
        assert_eq!(
            invoked_path(OsStr::new("lavenderd"), &path),
            Some(linked.clone())
        );
        // Nothing there: the caller falls back to the running executable.
        assert_eq!(invoked_path(OsStr::new("lavenderd"), OsStr::new("")), None);
        assert_eq!(
            invoked_path(dir.path().join("gone").as_os_str(), OsStr::new("")),
            None
        );
        assert_eq!(invoked_path(OsStr::new(""), &path), None);
    }
}
