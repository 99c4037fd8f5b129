//! The layers above the built-in defaults: a config file, `LAVENDER_*` environment
//! variables and command-line overrides, applied in that order.

use std::path::PathBuf;

use super::error::{ConfigError, ConfigErrorKind, Origin};
use super::tree::{self, Node, Segment};
use crate::data_root::DATA_ROOT_VAR;

/// What [`super::Config::load`] layers over the defaults. The environment is passed in
/// (not read) so that callers and tests decide what it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// A YAML config file; keys it leaves out keep their defaults.
    pub file: Option<PathBuf>,
    /// `(name, value)` environment variables; see [`LoadOptions::from_process_env`].
    pub env: Vec<(String, String)>,
    /// `("training.batch_size", "8")` overrides; values are YAML (`8`, `true`, `[10, 30]`).
    pub overrides: Vec<(String, String)>,
    /// The working directory: relative paths from the environment and overrides are
    /// taken against it (those of the file against the file's folder). `None`: left
    /// relative.
    pub cwd: Option<PathBuf>,
}

/// Short forms for the most-used keys.
const SHORTHANDS: &[(&str, &str)] = &[
    ("LAVENDER_SCALE", "scale"),
    ("LAVENDER_CHUNK", "chunk"),
    ("LAVENDER_SEED", "seed"),
];

/// Prefix of the generic form: `LAVENDER__TRAINING__BATCH_SIZE=8` sets
/// `training.batch_size` (double underscore separates keys; names are lowercased).
const GENERIC_PREFIX: &str = "LAVENDER__";

impl LoadOptions {
    /// Collects the process's `LAVENDER_*` variables (non-UTF-8 ones are skipped) and
    /// its working directory.
    pub fn from_process_env() -> Self {
        LoadOptions {
            cwd: std::env::current_dir().ok(),
            env: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .filter(|(k, _)| k.starts_with("LAVENDER_"))
                .collect(),
            ..LoadOptions::default()
        }
    }

    /// `LAVENDER_DATA_ROOT` from [`LoadOptions::env`], if set and not empty.
    pub fn env_data_root(&self) -> Option<PathBuf> {
        self.env
            .iter()
            .rev()
            .find(|(k, v)| k == DATA_ROOT_VAR && !v.is_empty())
            .map(|(_, v)| PathBuf::from(v))
    }
}

/// Applies the environment variables in order. Other `LAVENDER_*` names (one
/// underscore) belong to other parts of lavender and are ignored here.
pub(crate) fn apply_env(root: &mut Node, env: &[(String, String)]) -> Result<(), ConfigError> {
    for (var, value) in env {
        let origin = Origin::Env(var.clone());
        let path = if let Some(rest) = var.strip_prefix(GENERIC_PREFIX) {
            let parts: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
            if parts.iter().any(String::is_empty) {
                return Err(ConfigError::new(ConfigErrorKind::BadKeyPath {
                    path: parts.join("."),
                    message: "empty key; separate keys with exactly two underscores, e.g. LAVENDER__TRAINING__BATCH_SIZE".into(),
                })
                .at(Some(origin)));
            }
            parts.into_iter().map(Segment::Key).collect()
        } else if let Some((_, key)) = SHORTHANDS.iter().find(|(name, _)| name == var) {
            vec![Segment::Key(key.to_string())]
        } else {
            continue;
        };
        let node = tree::parse_value(value, &origin)?;
        tree::set_path(root, &path, node)?;
    }
    Ok(())
}

/// Applies `key.path=value` overrides in order.
pub(crate) fn apply_overrides(
    root: &mut Node,
    overrides: &[(String, String)],
) -> Result<(), ConfigError> {
    for (key, value) in overrides {
        let origin = Origin::Override(key.clone());
        let path = tree::parse_key_path(key.trim()).ok_or_else(|| {
            ConfigError::new(ConfigErrorKind::BadKeyPath {
                path: key.clone(),
                message:
                    "not a key path; write it like training.batch_size or training.stages[1].lr"
                        .into(),
            })
            .at(Some(origin.clone()))
        })?;
        let node = tree::parse_value(value, &origin)?;
        tree::set_path(root, &path, node)?;
    }
    Ok(())
}
