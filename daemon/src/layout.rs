//! Where the daemon keeps things: the data root (shared with the worker) and the
//! state directory (the daemon's own: pipeline.json, token, socket, markers, logs).

use std::path::{Path, PathBuf};

use lavender::config::PipelineStep;
use lavender::data_root;
use lavender::run::CHECKPOINTS_DIR;

/// The data root's directories a recorded path may point into: what is looked for
/// when an old record's absolute path no longer exists because the root was moved.
const MOVABLE_DIRS: &[&str] = &[CHECKPOINTS_DIR, data_root::LOGS];

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
        self.data_root.join(data_root::LOGS)
    }

    pub fn socket(&self) -> PathBuf {
        self.state_dir.join("lavenderd.sock")
    }

    /// The serving daemon's TCP address, for clients (and tests listening on port 0).
    pub fn addr_file(&self) -> PathBuf {
        self.state_dir.join("lavenderd.addr")
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

    /// Where each value of [`Layout::worker_config`] was set (the operator's file and
    /// line, a variable, a flag), named to the worker with `LAVENDER_CONFIG_ORIGINS`.
    pub fn worker_config_origins(&self) -> PathBuf {
        self.state_dir.join("pipeline-config.origins.json")
    }

    /// Done-markers of one chunk: `<state>/done/chunk<N>/<step>`.
    pub fn done_marker(&self, chunk: u32, step: PipelineStep) -> PathBuf {
        self.state_dir
            .join("done")
            .join(format!("chunk{chunk}"))
            .join(step.as_str())
    }

    /// How a path is written into the daemon's records (`pipeline.json`, done-markers):
    /// relative to the data root when inside it, so the records stay true after the
    /// data root is moved (`mv` to another disk); unchanged otherwise.
    pub fn to_recorded(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(&self.data_root) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
            _ => path.to_path_buf(),
        }
    }

    /// A recorded path made usable: a relative one lies under the data root. An
    /// absolute one (records written before paths were relative) is kept, unless it
    /// no longer exists and the same `checkpoints/…` or `logs/…` tail exists under
    /// this data root: the root was moved since.
    pub fn resolve_recorded(&self, path: &Path) -> PathBuf {
        if path.is_relative() {
            return self.data_root.join(path);
        }
        if path.exists() {
            return path.to_path_buf();
        }
        let parts: Vec<_> = path.components().collect();
        for (i, part) in parts.iter().enumerate().rev() {
            let name = part.as_os_str();
            if MOVABLE_DIRS.iter().any(|d| name == *d) {
                let moved: PathBuf = self.data_root.join(parts[i..].iter().collect::<PathBuf>());
                if moved.exists() {
                    return moved;
                }
            }
        }
        path.to_path_buf()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_the_root_are_recorded_relative_and_read_back_absolute() {
        let layout = Layout::new(PathBuf::from("/disk/a/data"), None);
        let run = Path::new("/disk/a/data/checkpoints/run-1");
        assert_eq!(layout.to_recorded(run), Path::new("checkpoints/run-1"));
        assert_eq!(layout.resolve_recorded(Path::new("checkpoints/run-1")), run);
        // Outside the root (a checkpoint given with --resume): kept as it is.
        let elsewhere = Path::new("/other/ckpt");
        assert_eq!(layout.to_recorded(elsewhere), elsewhere);
        assert_eq!(layout.resolve_recorded(elsewhere), elsewhere);
        assert_eq!(layout.to_recorded(&layout.data_root), layout.data_root);
    }

    #[test]
    fn an_absolute_path_into_a_moved_root_is_found_under_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("moved"), None);
        let run = layout.checkpoints_root().join("run-1");
        std::fs::create_dir_all(run.join("pretrain-00-00-00-0001")).unwrap();
        let old = dir.path().join("old/data/checkpoints/run-1");
        assert_eq!(layout.resolve_recorded(&old), run);
        assert_eq!(
            layout.resolve_recorded(&old.join("pretrain-00-00-00-0001")),
            run.join("pretrain-00-00-00-0001")
        );
        // Nothing there under the new root either: the record's path stands.
        let gone = dir.path().join("old/data/checkpoints/run-2");
        assert_eq!(layout.resolve_recorded(&gone), gone);
    }
}
