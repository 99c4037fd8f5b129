//! This program's path as it was started, for what must run it again: the daemon
//! restarting alone, `start` leaving a daemon in the background, a service unit, the
//! log relay of each worker.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The lavenderd executable as it was started: `argv[0]` as a path (what the
/// service's `ExecStart=` or `ProgramArguments` names, or a name found on `PATH`),
/// made absolute, not resolved through symlinks. An upgrade often swaps a symlink
/// (`/usr/local/bin/lavenderd` → a versioned directory, Homebrew's `Cellar`) and
/// removes the old version: `current_exe` names the old target, so it is only the
/// fallback, when `argv[0]` names no file.
pub fn invoked_exe() -> Result<PathBuf> {
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
