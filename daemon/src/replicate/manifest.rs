//! The remote manifest: what a replicated checkpoint holds (every object's size and
//! hash, in the checkpoint's own hash algorithm) and what it is (run, stage, step,
//! validation loss, when it was completed). Written last; its presence is the remote
//! commit marker.

use lavender::checkpoint::contents::{FileEntry, HashAlgorithm};
use serde::{Deserialize, Serialize};

/// The remote manifest's object name inside the checkpoint's remote folder.
pub const FILE: &str = "lavender-remote.json";
/// What `format` says.
pub const FORMAT: &str = "lavender.remote-checkpoint";
/// The version this code writes and reads.
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteManifest {
    pub format: String,
    pub version: u32,
    pub run: String,
    pub checkpoint: String,
    pub stage: String,
    pub step: u64,
    pub val_loss: Option<f64>,
    /// When the local checkpoint became complete (its `trainer_state.json`'s mtime),
    /// in ms since the epoch: a restored copy gets it back, so it sorts as it did.
    pub completed_unix_ms: u64,
    pub uploaded_at: String,
    pub algorithm: HashAlgorithm,
    /// Every object of the checkpoint but this manifest, paths relative to its folder.
    pub files: Vec<FileEntry>,
}

impl RemoteManifest {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Parses `bytes` read from `what` (the object's key, for the error).
    pub fn parse(bytes: &[u8], what: &str) -> Result<RemoteManifest, String> {
        let m: RemoteManifest = serde_json::from_slice(bytes)
            .map_err(|e| format!("{what}: not a remote checkpoint manifest: {e}"))?;
        if m.format != FORMAT || m.version != VERSION {
            return Err(format!(
                "{what}: format {:?} version {}; this lavenderd reads {FORMAT:?} version {VERSION}",
                m.format, m.version
            ));
        }
        Ok(m)
    }
}
