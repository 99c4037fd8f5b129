//! Where the daemon keeps things: the data root (shared with the worker) and the
//! state directory (the daemon's own: pipeline.json, token, socket, markers, logs).

use std::path::{Path, PathBuf};

use lavender::run::CHECKPOINTS_DIR;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub data_root: PathBuf,
    pub state_dir: PathBuf,
}

impl Layout {
    /// `state_dir` defaults to `<data_root>/state`.
    pub fn new(data_root: PathBuf, state_dir: Option<PathBuf>) -> Layout {
        let state_dir = state_dir.unwrap_or_else(|| data_root.join("state"));
        Layout {
            data_root,
            state_dir,
        }
    }

    pub fn checkpoints_root(&self) -> PathBuf {
        self.data_root.join(CHECKPOINTS_DIR)
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.data_root.join("logs")
    }

    pub fn socket(&self) -> PathBuf {
        self.state_dir.join("lavenderd.sock")
    }

    pub fn token(&self) -> PathBuf {
        self.state_dir.join("token")
    }

    pub fn pipeline_json(&self) -> PathBuf {
        self.state_dir.join("pipeline.json")
    }

    /// Held (flock) by the serving daemon; holds its pid.
    pub fn lock(&self) -> PathBuf {
        self.state_dir.join("lavenderd.pid")
    }

    /// stdout/stderr of a daemon started in the background by `lavenderd start`.
    pub fn daemon_log(&self) -> PathBuf {
        self.state_dir.join("lavenderd.log")
    }

    /// The resolved config handed to the worker with `--config`.
    pub fn worker_config(&self) -> PathBuf {
        self.state_dir.join("pipeline-config.yaml")
    }

    /// Done-markers of one chunk: `<state>/done/chunk<N>/<step>`.
    pub fn done_marker(&self, chunk: u32, step: &str) -> PathBuf {
        self.state_dir
            .join("done")
            .join(format!("chunk{chunk}"))
            .join(step)
    }

    /// Creates the state directory (mode 0700: it holds the token and the socket).
    pub fn ensure_state_dir(&self) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.state_dir)
    }
}

/// `path` relative to `base` when inside it, for shorter messages.
pub fn display_under(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}
