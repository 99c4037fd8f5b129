//! `<state>/decisions.jsonl`: appended one line at a time, rotated by size like the
//! logs (`logging.max_bytes`, `logging.keep`), read back across its rotated files.

use std::io;
use std::path::{Path, PathBuf};

use lavender::config::LoggingConfig;
use lavender::layout::Layout;

use super::record::{Decision, Line, Outcome};
use crate::logs::rotating::{RotatingFile, rotated};

/// Where the decision log of `layout` lives.
pub fn path(layout: &Layout) -> PathBuf {
    layout.state_dir.join("decisions.jsonl")
}

/// The writing end; lines are whole (a rotation falls between two lines).
pub(crate) struct Writer {
    file: RotatingFile,
}

impl Writer {
    pub(crate) fn open(path: &Path, limits: LoggingConfig) -> io::Result<Writer> {
        Ok(Writer {
            file: RotatingFile::open(path, limits)?,
        })
    }

    pub(crate) fn append(&mut self, line: &Line) -> io::Result<()> {
        let mut bytes = serde_json::to_vec(line).map_err(io::Error::other)?;
        bytes.push(b'\n');
        self.file.append(&bytes)
    }
}

/// A decision with its outcome, once one is known.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Entry {
    #[serde(flatten)]
    pub decision: Decision,
    pub outcome: Option<Outcome>,
}

/// Every decision kept at `path` (its rotated files too), oldest first, each with
/// its outcome. A line that does not parse (a torn last line) is skipped and
/// counted in the second value.
pub fn read(path: &Path) -> io::Result<(Vec<Entry>, usize)> {
    let mut files: Vec<PathBuf> = (1..)
        .map(|k| rotated(path, k))
        .take_while(|p| p.exists())
        .collect();
    files.reverse();
    files.push(path.to_path_buf());
    let mut entries: Vec<Entry> = Vec::new();
    let mut skipped = 0;
    for file in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot read {}: {e}", file.display()),
                ));
            }
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Line>(line) {
                Ok(Line::Decision(decision)) => entries.push(Entry {
                    decision: *decision,
                    outcome: None,
                }),
                Ok(Line::Outcome(outcome)) => {
                    // Its decision may have rotated away: the outcome alone is dropped.
                    if let Some(e) = entries.iter_mut().rfind(|e| e.decision.id == outcome.of) {
                        e.outcome = Some(outcome);
                    }
                }
                Err(_) => skipped += 1,
            }
        }
    }
    Ok((entries, skipped))
}
