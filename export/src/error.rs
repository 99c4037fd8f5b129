//! Errors of export and resolve. Each names the path or option it is about and
//! what to do.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading or writing a file failed, or a core format did not parse.
    #[error(transparent)]
    Core(#[from] lavender::Error),
    /// A file exists but its content is not what lavender writes.
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    /// Something the export or resolve needs is missing.
    #[error("{what} not found at {}: {hint}", path.display())]
    Missing {
        what: String,
        path: PathBuf,
        hint: String,
    },
    /// A lavender checkpoint was passed where an exported one is needed.
    #[error(
        "{} is a lavender checkpoint that has not been exported; run `lavenderd export --run {} --checkpoints {}` first and pass {}/exported/checkpoint-<step> instead",
        path.display(), run.display(), name, run.display()
    )]
    NotExported {
        path: PathBuf,
        run: PathBuf,
        name: String,
    },
    /// The step of a checkpoint cannot be told from its name or its files.
    #[error(
        "cannot tell the training step of {}: expected a directory named checkpoint-<N>, step_<N> or step_<N>.ckpt, or a lavender checkpoint with trainer_state.json",
        path.display()
    )]
    NoStep { path: PathBuf },
    /// An option's value cannot be used.
    #[error("{option}: {reason}")]
    BadOption {
        option: &'static str,
        reason: String,
    },
}

impl ExportError {
    pub(crate) fn invalid(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        ExportError::Invalid {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn missing(
        what: impl Into<String>,
        path: impl Into<PathBuf>,
        hint: impl Into<String>,
    ) -> Self {
        ExportError::Missing {
            what: what.into(),
            path: path.into(),
            hint: hint.into(),
        }
    }

    pub(crate) fn bad_option(option: &'static str, reason: impl Into<String>) -> Self {
        ExportError::BadOption {
            option,
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = ExportError> = std::result::Result<T, E>;
