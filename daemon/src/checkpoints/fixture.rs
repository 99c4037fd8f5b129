//! The room's tests' run (a data root's `checkpoints/` and one run folder in it) and
//! its saves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lavender::checkpoint::contents::{self, HashAlgorithm};
use lavender::checkpoint::{CheckpointBuilder, CheckpointName};
use lavender::events::{self, Event, kind};
use lavender::trainer_state::TrainerState;

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

/// A complete checkpoint `<stage>-12-00-<n>-<n>` of step `n` in `dir` (its weights,
/// its validation loss, a manifest when `manifest`), completed `n` seconds after a
/// fixed time, and its `checkpoint_saved` event.
pub(crate) fn save(
    dir: &Path,
    stage: &str,
    n: u32,
    val_loss: Option<f64>,
    manifest: bool,
) -> PathBuf {
    let time = chrono::NaiveTime::from_hms_opt(12, 0, n).unwrap();
    let name = CheckpointName::new(stage, time, n).unwrap();
    let b = CheckpointBuilder::begin(dir, &name).unwrap();
    std::fs::write(b.dir().join("model.safetensors"), format!("weights {n}")).unwrap();
    if manifest {
        let m = contents::build_from_disk(b.dir(), HashAlgorithm::Blake3).unwrap();
        contents::write(b.dir(), &m).unwrap();
    }
    let mut state = TrainerState::new(stage, n as u64);
    state.val_loss = val_loss;
    let path = b.commit(&state).unwrap();
    let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + n as u64);
    std::fs::File::options()
        .write(true)
        .open(path.join("trainer_state.json"))
        .unwrap()
        .set_modified(t)
        .unwrap();
    events::append(
        dir,
        &Event::new(kind::CHECKPOINT_SAVED, "saved").with("path", path.display().to_string()),
    )
    .unwrap();
    path
}
