//! Where things are kept: the data root (shared with the worker) and the state
//! directory (the daemon's own: pipeline.json, token, socket, markers, logs). The
//! daemon and the commands that read its files with no daemon name them from here.

use std::path::{Path, PathBuf};

use crate::config::PipelineStep;
use crate::data_root;
use crate::data_root::CHECKPOINTS;

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
        self.data_root.join(CHECKPOINTS)
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

    /// The pipeline's record ([`crate::pipeline_file::PipelineRecord`]).
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
    /// relative to the data root when inside it ([`data_root::to_recorded`]).
    pub fn to_recorded(&self, path: &Path) -> PathBuf {
        data_root::to_recorded(&self.data_root, path)
    }

    /// A recorded path made usable ([`data_root::resolve_recorded`]).
    pub fn resolve_recorded(&self, path: &Path) -> PathBuf {
        data_root::resolve_recorded(&self.data_root, path)
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
