//! A bundle on disk: the files, each under the bundle's size bound, and its index
//! (`bundle.json`, for tools; `summary.txt`, for a person).
//!
//! ```text
//! <run>/incidents/<YYYYmmddTHHMMSS.mmmZ>-hang/
//!   bundle.json  summary.txt  heartbeat.json  log-tail.txt  nvidia-smi.txt
//!   pid-<pid>/status  wchan  kernel-stack  fds.txt  python-stack.txt | native-stack.txt
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::tool::Ran;

#[derive(Debug, Serialize)]
pub(crate) struct Index {
    pub what: String,
    pub at: String,
    pub note: String,
    pub processes: Vec<ProcessEvidence>,
    /// The file written, or why not.
    pub heartbeat: Option<String>,
    pub log_tail: Option<String>,
    pub nvidia_smi: Option<Ran>,
    pub took_s: f64,
    pub bytes: u64,
    /// Something was cut short to keep the bundle within its bound.
    pub truncated: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct ProcessEvidence {
    pub pid: u32,
    pub exe: Option<String>,
    pub cmdline: Vec<String>,
    /// `/proc/<pid>/status`'s State ("T (stopped)", "S (sleeping)").
    pub state: String,
    /// The files written for it, or why one could not be.
    pub files: Vec<String>,
    /// The command that took its stacks.
    pub stack_tool: String,
    pub stack: Ran,
    pub stack_file: Option<String>,
}

/// A finished bundle: where it is and what it holds.
pub(crate) struct Bundle {
    pub dir: PathBuf,
    pub index: Index,
}

pub(super) struct Writer {
    dir: PathBuf,
    max: u64,
    written: u64,
    truncated: bool,
}

impl Writer {
    pub(super) fn create(dir: &Path, max: u64) -> std::io::Result<Writer> {
        std::fs::create_dir_all(dir)?;
        Ok(Writer {
            dir: dir.to_path_buf(),
            max,
            written: 0,
            truncated: false,
        })
    }

    /// Writes `bytes` (cut to what the bound leaves) to `rel`; says what it did.
    pub(super) fn put(&mut self, rel: &str, bytes: &[u8]) -> String {
        let room = self.max.saturating_sub(self.written) as usize;
        let kept = &bytes[..bytes.len().min(room)];
        if kept.len() < bytes.len() {
            self.truncated = true;
        }
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        match std::fs::write(&path, kept) {
            Ok(()) => {
                self.written += kept.len() as u64;
                if kept.len() < bytes.len() {
                    format!(
                        "{rel} (cut to {} of {} bytes: the bundle's bound)",
                        kept.len(),
                        bytes.len()
                    )
                } else {
                    rel.to_string()
                }
            }
            Err(e) => format!("{rel}: cannot write: {e}"),
        }
    }

    pub(super) fn finish(mut self, mut index: Index) -> Bundle {
        index.truncated = self.truncated;
        let summary = summary(&index);
        // The index itself is small; it is written whatever the bound says.
        self.max = u64::MAX;
        self.put("summary.txt", summary.as_bytes());
        index.bytes = self.written;
        let json = serde_json::to_vec_pretty(&index).unwrap_or_default();
        self.put("bundle.json", &json);
        Bundle {
            dir: self.dir,
            index,
        }
    }
}

/// The index for a person.
fn summary(index: &Index) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} evidence taken at {}: {}",
        index.what, index.at, index.note
    );
    let _ = writeln!(
        s,
        "took {:.2} s; {} bytes{}",
        index.took_s,
        index.bytes,
        if index.truncated {
            " (cut to the 50 MB bound)"
        } else {
            ""
        }
    );
    for p in &index.processes {
        let _ = writeln!(s, "\npid {} ({}) {}", p.pid, p.state, p.cmdline.join(" "));
        let _ = writeln!(s, "  stacks: {} -> {:?}", p.stack_tool, p.stack);
        for f in p.files.iter().chain(&p.stack_file) {
            let _ = writeln!(s, "  {f}");
        }
    }
    if index.processes.is_empty() {
        let _ = writeln!(s, "\nno live process of the worker's generation was found");
    }
    let _ = writeln!(
        s,
        "\nheartbeat: {}",
        index.heartbeat.as_deref().unwrap_or("no run directory")
    );
    let _ = writeln!(
        s,
        "log tail: {}",
        index.log_tail.as_deref().unwrap_or("no pipeline log")
    );
    let _ = writeln!(s, "nvidia-smi: {:?}", index.nvidia_smi);
    s
}
