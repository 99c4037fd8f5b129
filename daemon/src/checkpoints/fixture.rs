//! The room's tests' run: a data root's `checkpoints/` and one run folder in it.

use std::path::PathBuf;

pub(crate) struct Run {
    pub _root: tempfile::TempDir,
    pub checkpoints: PathBuf,
    pub dir: PathBuf,
}

pub(crate) fn run() -> Run {
    let root = tempfile::tempdir().unwrap();
    let checkpoints = root.path().join("checkpoints");
    let dir = checkpoints.join("run-2026-04-24_16-08-45");
    std::fs::create_dir_all(&dir).unwrap();
    Run {
        _root: root,
        checkpoints,
        dir,
    }
}
