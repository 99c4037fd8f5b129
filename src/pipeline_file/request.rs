//! The request a pipeline was started with (`POST /pipeline/start`, the operator
//! guide's flags): the record keeps it (`request`), so a daemon that restarts the
//! pipeline asks for what was asked; the API (`lavender_api`) sends it. Unknown
//! fields are rejected so a typo is never silently ignored.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::{PipelineStep, Scale};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// tiny | small | medium | large; the config's `scale` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<Scale>,
    /// A checkpoint path, a run directory, a file inside a checkpoint, or `latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
    /// 1..=4; the config's `chunk` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<u32>,
    /// Run the data steps only: `train` and the steps after it are skipped.
    #[serde(default)]
    pub skip_train: bool,
    /// Train from step 0 in a new run even though the data root holds an unfinished
    /// run that could be resumed (without it, such a start is refused).
    #[serde(default)]
    pub fresh: bool,
    /// Run the chunk's steps again from `from_step` (default: the first), done or not.
    #[serde(default)]
    pub force: bool,
    /// With `force`: the step to run again from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_step: Option<PipelineStep>,
    /// Must match the daemon's data root when given (a daemon serves one data root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_root: Option<PathBuf>,
    /// The config file to run with (`--config`): the daemon reads it again, checks it
    /// is the content the operator's command read, and runs with it. Absent: the
    /// daemon's own config file, read again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigFileRef>,
}

/// A config file as the operator's command read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFileRef {
    /// Absolute.
    pub path: PathBuf,
    /// SHA-256 (hex) of its bytes.
    pub sha256: String,
}

impl ConfigFileRef {
    /// The file at `path` as read in `bytes`.
    pub fn new(path: &Path, bytes: &[u8]) -> ConfigFileRef {
        ConfigFileRef {
            path: path.to_path_buf(),
            sha256: sha256_hex(bytes),
        }
    }
}

/// SHA-256 of `bytes` in lowercase hex: how a start names the content it read, and
/// how the daemon checks it reads the same.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub const MAX_CHUNK: u32 = 4;

impl StartRequest {
    /// Checks what can be checked without the file system.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(chunk) = self.chunk
            && !(1..=MAX_CHUNK).contains(&chunk)
        {
            return Err(format!(
                "chunk {chunk} is out of range: use 1..={MAX_CHUNK}"
            ));
        }
        if self.from_step.is_some() && !self.force {
            return Err(
                "from_step runs finished steps again only with force: add force (--force)".into(),
            );
        }
        if self.fresh && self.resume.is_some() {
            return Err("fresh (start over) and resume contradict each other: pass one".into());
        }
        if let Some(c) = &self.config
            && !c.path.is_absolute()
        {
            return Err(format!(
                "config {}: the daemon reads the file itself, so give its absolute path",
                c.path.display()
            ));
        }
        if self.resume.as_deref().is_some_and(|r| r.trim().is_empty()) {
            return Err(
                "resume is empty: pass a checkpoint path, a run directory or `latest`".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_is_named() {
        let err = serde_json::from_str::<StartRequest>(r#"{"scale":"tiny","chunks":2}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("chunks"), "{err}");
    }

    #[test]
    fn chunk_range() {
        let req = StartRequest {
            chunk: Some(5),
            ..StartRequest::default()
        };
        assert!(req.validate().unwrap_err().contains("1..=4"));
    }

    #[test]
    fn a_config_file_is_named_by_the_hash_of_its_bytes() {
        let r = ConfigFileRef::new(Path::new("/p/l.yaml"), b"abc");
        assert_eq!(
            r.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
