//! The `logging:` section: how big a log file grows before it is rotated, and how
//! many rotated files are kept. It applies to the daemon's own log
//! (`state/lavenderd.log`, when the daemon writes it) and to every pipeline log
//! (`logs/pipeline_chunk<N>_*.log`). Absent in configs older than the section: the
//! defaults apply.

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, ConfigErrorKind};

/// The smallest `max_bytes` accepted: a rotation per handful of lines helps nobody.
pub const MIN_MAX_BYTES: u64 = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// A log file that would grow past this many bytes is renamed `<name>.1` (older
    /// ones shift to `.2` …) and a new one begun.
    pub max_bytes: u64,
    /// Rotated files kept per log (`<name>.1` … `<name>.<keep>`); older ones are deleted.
    pub keep: u32,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            max_bytes: 64 << 20,
            keep: 5,
        }
    }
}

impl LoggingConfig {
    pub fn is_default(&self) -> bool {
        *self == LoggingConfig::default()
    }
}

pub(crate) fn validate(l: &LoggingConfig) -> Result<(), ConfigError> {
    if l.max_bytes < MIN_MAX_BYTES {
        return Err(ConfigError::new(ConfigErrorKind::OutOfRange {
            path: "logging.max_bytes".into(),
            value: l.max_bytes.to_string(),
            range: format!("{MIN_MAX_BYTES}.."),
        }));
    }
    if l.keep == 0 {
        return Err(ConfigError::new(ConfigErrorKind::Invalid {
            path: "logging.keep".into(),
            message:
                "keep at least 1 rotated file (a reader following the log may still be reading it)"
                    .into(),
        }));
    }
    Ok(())
}
