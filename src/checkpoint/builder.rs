//! Building a checkpoint: its files written into a hidden staged directory, then
//! `trainer_state.json`, then the rename that makes it appear complete.

use std::path::{Path, PathBuf};

use super::CheckpointName;
use crate::atomic::StagedDir;
use crate::error::{Error, Result};
use crate::trainer_state::{self, TrainerState};

/// A checkpoint directory under construction: a [`StagedDir`] whose `commit` writes
/// `trainer_state.json` last, the marker that makes it complete.
#[derive(Debug)]
pub struct CheckpointBuilder {
    staged: StagedDir,
}

impl CheckpointBuilder {
    pub fn begin(run_dir: &Path, name: &CheckpointName) -> Result<Self> {
        let target = run_dir.join(name.to_string());
        if target.exists() {
            return Err(Error::Malformed {
                path: target,
                reason: "a checkpoint with this name already exists; counters must not be reused"
                    .into(),
            });
        }
        Ok(CheckpointBuilder {
            staged: StagedDir::begin(&target)?,
        })
    }

    /// The directory to write the checkpoint's files into.
    pub fn dir(&self) -> &Path {
        self.staged.dir()
    }

    /// The path the checkpoint will have once committed.
    pub fn target(&self) -> &Path {
        self.staged.target()
    }

    /// Every payload file durable, then the marker, then the rename. When the
    /// checkpoint has a manifest, the marker's bytes are hashed into it first
    /// ([`super::contents::cover`]): "verified" then covers the step, the data cursor
    /// and the rest of the state a resume reads.
    pub fn commit(self, state: &TrainerState) -> Result<PathBuf> {
        self.staged.commit_with(|dir| {
            let bytes = trainer_state::to_bytes(dir, state)?;
            super::contents::cover(dir, trainer_state::FILE, &bytes)?;
            crate::atomic::write_file(&dir.join(trainer_state::FILE), &bytes)
        })
    }
}
