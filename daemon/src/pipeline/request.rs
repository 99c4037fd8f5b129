//! What `lavenderd start` and `POST /pipeline/start` ask for: the operator guide's
//! flags. Unknown fields are rejected so a typo is never silently ignored.

use std::path::PathBuf;

use lavender::config::Scale;
use serde::{Deserialize, Serialize};

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
    /// Must match the daemon's data root when given (a daemon serves one data root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_root: Option<PathBuf>,
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
}
