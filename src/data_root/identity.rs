//! Whether the folder a daemon started on is still its data root. A disk unplugged
//! under a running daemon takes the folder with it; writing on as if nothing happened
//! would recreate its path on the disk beneath (`/Volumes/SSD/…` on the boot disk)
//! or let a later lookup fall through to another candidate. So the daemon keeps the
//! folder's identity (device and inode) and stops, naming it, when the path is gone
//! or is another folder now.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A data root as it was when a daemon started on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    path: PathBuf,
    /// How it was chosen ([`super::Choice::describe`]), for the error.
    how: String,
    dev: u64,
    ino: u64,
}

/// The data root is not the folder the daemon started on any more.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootGone {
    #[error(
        "the data root {path} ({how}) is gone ({reason}): was its disk unplugged? lavenderd does not carry on in another folder; plug it back in and start again (`lavenderd start --resume latest` resumes its run)"
    )]
    Missing {
        path: PathBuf,
        how: String,
        reason: String,
    },
    #[error(
        "the data root {path} ({how}) is another folder now (a new folder was made at its path, as when a disk is unplugged and the path written again): lavenderd does not carry on there; plug the disk back in and start again"
    )]
    Replaced { path: PathBuf, how: String },
}

impl Identity {
    /// The data root at `path` as it is now.
    pub fn capture(path: &Path, how: String) -> std::io::Result<Identity> {
        let meta = std::fs::metadata(path)?;
        Ok(Identity {
            path: path.to_path_buf(),
            how,
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `path` is still the folder captured.
    pub fn check(&self) -> Result<(), RootGone> {
        match std::fs::metadata(&self.path) {
            Ok(meta) if meta.dev() == self.dev && meta.ino() == self.ino => Ok(()),
            Ok(_) => Err(RootGone::Replaced {
                path: self.path.clone(),
                how: self.how.clone(),
            }),
            Err(e) => Err(RootGone::Missing {
                path: self.path.clone(),
                how: self.how.clone(),
                reason: e.to_string(),
            }),
        }
    }
}
