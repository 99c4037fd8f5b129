//! Config errors: every one says where the offending value came from (file, line and
//! column; environment variable; or command-line override), which key, and what to do.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// How errors in the built-in defaults name them.
pub(crate) const DEFAULT_ORIGIN: &str = "configs/default.yaml";

/// Where a config value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A YAML text: its name (file path, or `configs/default.yaml` for the built-in
    /// defaults) and the 1-based line and column of the key or value.
    File {
        name: Arc<str>,
        line: u32,
        column: u32,
    },
    /// An environment variable, by name.
    Env(String),
    /// A command-line override `key=value`, by its key path.
    Override(String),
    /// A flag of a command that sets a key, as typed (`lavenderd start --scale tiny`
    /// sets `scale`).
    Flag(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A value nobody set: say so, and where setting it belongs.
            Origin::File { name, line, column } if &**name == DEFAULT_ORIGIN => write!(
                f,
                "{name}:{line}:{column} (a built-in default; set the key in your config file to change it)"
            ),
            Origin::File { name, line, column } => write!(f, "{name}:{line}:{column}"),
            Origin::Env(var) => write!(f, "environment variable {var}"),
            Origin::Override(key) => write!(f, "override `{key}=…`"),
            Origin::Flag(flag) => write!(f, "`{flag}`"),
        }
    }
}

/// A config error: what went wrong ([`ConfigErrorKind`]) and, when known, where.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub origin: Option<Origin>,
    /// Boxed so `Result<_, ConfigError>` stays small.
    pub kind: Box<ConfigErrorKind>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Some(origin) => write!(f, "{origin}: {}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

impl ConfigError {
    pub(crate) fn new(kind: ConfigErrorKind) -> Self {
        ConfigError {
            origin: None,
            kind: Box::new(kind),
        }
    }

    /// A value that breaks a rule known where it is used (the worker's): `message`
    /// says what is wrong and what to do. Located with
    /// [`super::ConfigOrigins::relocate`].
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::new(ConfigErrorKind::Invalid {
            path: path.into(),
            message: message.into(),
        })
    }

    pub(crate) fn at(mut self, origin: Option<Origin>) -> Self {
        if self.origin.is_none() {
            self.origin = origin;
        }
        self
    }

    /// The key path the error is about (`training.stages[1].lr`), if it is about one.
    pub fn path(&self) -> Option<&str> {
        use ConfigErrorKind::*;
        match &*self.kind {
            UnknownKey { path, .. }
            | WrongType { path, .. }
            | UnknownValue { path, .. }
            | OutOfRange { path, .. }
            | MissingKey { path, .. }
            | Invalid { path, .. } => Some(path),
            BadKeyPath { path, .. } => Some(path),
            Syntax { .. } | Read { .. } => None,
        }
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigErrorKind {
    /// A key the config does not have.
    #[error("unknown key `{path}` — {}", hint(suggestion.as_deref(), valid, "keys"))]
    UnknownKey {
        path: String,
        suggestion: Option<String>,
        valid: Vec<String>,
    },
    /// A value of the wrong YAML type.
    #[error("{path}: expected {expected}, found {found}")]
    WrongType {
        path: String,
        expected: String,
        found: String,
    },
    /// A string that is not one of the allowed values.
    #[error("{path}: unknown value `{found}` — {}", value_hint(suggestion.as_deref(), valid))]
    UnknownValue {
        path: String,
        found: String,
        suggestion: Option<String>,
        valid: Vec<String>,
    },
    /// A number outside its allowed range.
    #[error("{path}: {value} is out of range ({range})")]
    OutOfRange {
        path: String,
        value: String,
        range: String,
    },
    /// A required key is absent.
    #[error("{path}: missing key `{key}` — add it")]
    MissingKey { path: String, key: String },
    /// Any other rule a value breaks; `message` says what to do.
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    /// The text is not valid YAML.
    #[error("invalid YAML: {message}")]
    Syntax { message: String },
    /// The config file could not be read.
    #[error("cannot read config file {}: {source} — check the path given with --config", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `LAVENDER__…` variable or override whose key path cannot be applied (it
    /// indexes past the end of a list, or descends into a scalar).
    #[error("cannot set `{path}`: {message}")]
    BadKeyPath { path: String, message: String },
}

fn hint(suggestion: Option<&str>, valid: &[String], noun: &str) -> String {
    match suggestion {
        Some(s) => format!("did you mean `{s}`?"),
        None if valid.is_empty() => "remove it".to_string(),
        None => format!(
            "valid {noun} here: {}",
            valid
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A value comes from a short closed set: name all of it, after the likely typo.
fn value_hint(suggestion: Option<&str>, valid: &[String]) -> String {
    match suggestion {
        Some(s) if !valid.is_empty() => format!(
            "did you mean `{s}`? (valid values: {})",
            valid
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => hint(suggestion, valid, "values"),
    }
}

/// The candidate nearest to `word` by edit distance, if it is near enough to be a
/// plausible typo.
pub(crate) fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), *c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1) + 1 && *d < c.len().max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}
