//! Errors of the core library. Each carries the path or value it is about and,
//! where there is one, what the user can do.

use std::io;
use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation on a named path failed.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file exists but is empty (e.g. a heartbeat caught before its first write).
    #[error("{} is empty", path.display())]
    Empty { path: PathBuf },
    /// A file exists but does not parse: truncated, garbage, or of another format.
    #[error("{} is malformed: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    /// A name that is not of the form the caller expected.
    #[error("{name:?} is not a valid {kind} name (expected {expected})")]
    BadName {
        kind: &'static str,
        name: String,
        expected: &'static str,
    },
    /// Another process holds the lock on an output being built.
    #[error("another run is writing {} (lock {} is held); wait for it to finish", path.display(), lock.display())]
    Busy { path: PathBuf, lock: PathBuf },
    /// A run's lineage (or that of a run it resumed from) cannot be read: which runs
    /// trained it is unknown, so nothing that deletes runs may go on.
    #[error("{source}: which runs {} resumed from cannot be told; repair that lineage.json (`resumed_from`, `parent_run`, `parent_checkpoint`) or, if its run started afresh, delete it, then try again", run.display())]
    Lineage {
        run: PathBuf,
        #[source]
        source: Box<Error>,
    },
    /// Something the caller needs is not there.
    #[error("{what} not found at {}: {hint}", path.display())]
    NotFound {
        what: &'static str,
        path: PathBuf,
        hint: &'static str,
    },
}

impl Error {
    pub fn io(action: &'static str, path: impl AsRef<Path>, source: io::Error) -> Self {
        Error::Io {
            action,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// True when the underlying cause is a file or directory that does not exist,
    /// which callers racing with retention treat as "already gone".
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Io { source, .. } => source.kind() == io::ErrorKind::NotFound,
            Error::NotFound { .. } => true,
            _ => false,
        }
    }
}

/// Attach a path and an action to an `io::Result`.
pub trait IoContext<T> {
    fn ctx(self, action: &'static str, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, action: &'static str, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(action, path, e))
    }
}
