//! Finding the worker program. The default `worker.command` names `lavender-worker`
//! bare; a user who ran `./target/release/lavenderd` or installed both binaries into
//! one folder that is not on PATH still means the worker beside lavenderd. So a bare
//! `lavender-worker` is looked up on PATH first, then beside our own executable.
//! Any other command (a path, `python`, `torchrun`, …) is left to the OS as given.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The worker program lavenderd ships with, and the only name looked up beside it.
pub(crate) const DEFAULT_WORKER: &str = "lavender-worker";

/// Where a bare `lavender-worker` was looked for, when it was found nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerNotFound {
    pub path_dirs: Vec<PathBuf>,
    pub beside: Option<PathBuf>,
}

impl std::fmt::Display for WorkerNotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path_dirs.is_empty() {
            "PATH (empty)".to_string()
        } else {
            format!(
                "PATH ({})",
                self.path_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            )
        };
        let beside = self
            .beside
            .as_ref()
            .map(|d| format!(" and beside lavenderd ({})", d.display()))
            .unwrap_or_default();
        write!(
            f,
            "the worker program `{DEFAULT_WORKER}` (config key worker.command) is not in {path}{beside}; \
             install both binaries with `make install` (PREFIX=~/.local by default, then put PREFIX/bin \
             on PATH), or set worker.command to the worker's full path"
        )
    }
}

impl std::error::Error for WorkerNotFound {}

/// The program to execute for `program`: unchanged unless it is the bare default
/// worker name, which resolves to the first executable on `path` (the value of
/// PATH), else the one in `exe_dir` (the folder of lavenderd's own executable).
pub fn worker_program(
    program: &str,
    path: Option<&OsStr>,
    exe_dir: Option<&Path>,
) -> Result<String, WorkerNotFound> {
    if program != DEFAULT_WORKER {
        return Ok(program.to_string());
    }
    let path_dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    if path_dirs
        .iter()
        .any(|d| is_executable(&d.join(DEFAULT_WORKER)))
    {
        // Found on PATH: keep the bare name, so the log shows what the user configured.
        return Ok(program.to_string());
    }
    if let Some(dir) = exe_dir {
        let beside = dir.join(DEFAULT_WORKER);
        if is_executable(&beside) {
            return Ok(beside.display().to_string());
        }
    }
    Err(WorkerNotFound {
        path_dirs,
        beside: exe_dir.map(Path::to_path_buf),
    })
}

/// `worker_program` with this process's PATH and executable.
pub fn worker_program_here(program: &str) -> Result<String, WorkerNotFound> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    worker_program(
        program,
        std::env::var_os("PATH").as_deref(),
        exe_dir.as_deref(),
    )
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn exe(dir: &Path) {
        let p = dir.join(DEFAULT_WORKER);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn path_first_then_beside_lavenderd_then_an_error_naming_both() {
        let on_path = tempfile::tempdir().unwrap();
        let beside = tempfile::tempdir().unwrap();
        let empty = tempfile::tempdir().unwrap();
        exe(on_path.path());
        exe(beside.path());
        let path = std::env::join_paths([empty.path(), on_path.path()]).unwrap();
        assert_eq!(
            worker_program(DEFAULT_WORKER, Some(&path), Some(beside.path())).unwrap(),
            DEFAULT_WORKER
        );
        let path = std::env::join_paths([empty.path()]).unwrap();
        assert_eq!(
            worker_program(DEFAULT_WORKER, Some(&path), Some(beside.path())).unwrap(),
            beside.path().join(DEFAULT_WORKER).display().to_string()
        );
        let err = worker_program(DEFAULT_WORKER, Some(&path), Some(empty.path())).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&empty.path().display().to_string()), "{text}");
        assert!(text.contains("make install"), "{text}");
        assert!(text.contains("PATH ("), "{text}");
    }

    #[test]
    fn other_commands_and_non_executables_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DEFAULT_WORKER), "not executable").unwrap();
        assert_eq!(worker_program("python", None, None).unwrap(), "python");
        assert_eq!(
            worker_program("/opt/w/lavender-worker", None, None).unwrap(),
            "/opt/w/lavender-worker"
        );
        let path = std::env::join_paths([dir.path()]).unwrap();
        assert!(worker_program(DEFAULT_WORKER, Some(&path), Some(dir.path())).is_err());
    }
}
