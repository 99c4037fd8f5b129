//! Run directories: `<data_root>/checkpoints/run-<YYYY-MM-DD_HH-MM-SS>/`, one per
//! training run, named by its start time in UTC. A resumed run records its parent
//! (`lineage.rs`).

mod lineage;

pub use lineage::{
    LINEAGE_FILE, Lineage, chain, lineage_path, lineage_root, names, parent, read_lineage,
    record_parent, try_chain,
};

use std::fs;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, NaiveDateTime, Utc};

use crate::error::{Error, IoContext, Result};

/// The DPO reference model, saved once per run when DPO starts and loaded by every
/// resume of a checkpoint taken mid-DPO (`lavender-worker`).
pub const DPO_REFERENCE_FILE: &str = "dpo-reference.safetensors";

/// The files of a run folder that a resume of one of its checkpoints reads, beside
/// the checkpoint's own: the run's config snapshot (`config.yaml`), its tokenizer
/// (the resume refuses another), the DPO reference, the data skipped after a rollback
/// (`skipped.json`) and the run's lineage. Replication copies them with each
/// checkpoint, so a restore resumes at every stage.
pub const RUN_FILES: &[&str] = &[
    "config.yaml",
    crate::tokens::TOKENIZER_FILE,
    DPO_REFERENCE_FILE,
    crate::skips::FILE,
    LINEAGE_FILE,
];

/// A run directory's name: this prefix, then the time it began (under the data
/// root's `crate::data_root::CHECKPOINTS`).
pub const RUN_PREFIX: &str = "run-";
const RUN_TIME_FORMAT: &str = "%Y-%m-%d_%H-%M-%S";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    pub path: PathBuf,
    pub started: NaiveDateTime,
}

impl RunDir {
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

pub fn run_dir_name(t: DateTime<Utc>) -> String {
    format!("{RUN_PREFIX}{}", t.format(RUN_TIME_FORMAT))
}

/// Parse `run-2026-04-24_16-08-45` back into its start time.
pub fn parse_run_name(name: &str) -> Result<NaiveDateTime> {
    let bad = || Error::BadName {
        kind: "run directory",
        name: name.to_string(),
        expected: "run-YYYY-MM-DD_HH-MM-SS",
    };
    let stamp = name.strip_prefix(RUN_PREFIX).ok_or_else(bad)?;
    if stamp.len() != 19 {
        return Err(bad());
    }
    NaiveDateTime::parse_from_str(stamp, RUN_TIME_FORMAT).map_err(|_| bad())
}

/// Create a new run directory for a run starting at `t`. Two runs started within
/// the same second get consecutive seconds, so names stay unique and parseable.
pub fn create_run(checkpoints_root: &Path, t: DateTime<Utc>) -> Result<RunDir> {
    fs::create_dir_all(checkpoints_root).ctx("create checkpoints directory", checkpoints_root)?;
    for bump in 0..120 {
        let at = t + Duration::seconds(bump);
        let path = checkpoints_root.join(run_dir_name(at));
        match fs::create_dir(&path) {
            Ok(()) => {
                return Ok(RunDir {
                    path,
                    started: at.naive_utc(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("create run directory", &path, e)),
        }
    }
    Err(Error::Malformed {
        path: checkpoints_root.to_path_buf(),
        reason: "could not find a free run directory name within two minutes of now".into(),
    })
}

/// Every run directory under `checkpoints_root`, newest first. A missing root is an
/// empty list (nothing has run yet).
pub fn list_runs(checkpoints_root: &Path) -> Result<Vec<RunDir>> {
    let entries = match fs::read_dir(checkpoints_root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", checkpoints_root, e)),
    };
    let mut runs = Vec::new();
    for entry in entries {
        let entry = entry.ctx("list", checkpoints_root)?;
        let name = entry.file_name();
        let Ok(started) = parse_run_name(&name.to_string_lossy()) else {
            continue;
        };
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            runs.push(RunDir {
                path: entry.path(),
                started,
            });
        }
    }
    runs.sort_by_key(|r| std::cmp::Reverse(r.started));
    Ok(runs)
}

/// The newest run, which is the active one while training runs.
pub fn latest_run(checkpoints_root: &Path) -> Result<Option<RunDir>> {
    Ok(list_runs(checkpoints_root)?.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 4, 24, h, m, s).unwrap()
    }

    #[test]
    fn names_round_trip() {
        let name = run_dir_name(at(16, 8, 45));
        assert_eq!(name, "run-2026-04-24_16-08-45");
        assert_eq!(parse_run_name(&name).unwrap(), at(16, 8, 45).naive_utc());
        for bad in [
            "run-2026-04-24",
            "rn-2026-04-24_16-08-45",
            "run-2026-13-24_16-08-45",
        ] {
            assert!(parse_run_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn list_newest_first_and_ignores_others() {
        let root = tempfile::tempdir().unwrap();
        create_run(root.path(), at(10, 0, 0)).unwrap();
        create_run(root.path(), at(12, 0, 0)).unwrap();
        create_run(root.path(), at(11, 0, 0)).unwrap();
        fs::create_dir(root.path().join("notes")).unwrap();
        fs::write(root.path().join("run-2026-04-24_13-00-00"), "a file").unwrap();
        let runs = list_runs(root.path()).unwrap();
        let names: Vec<_> = runs.iter().map(RunDir::name).collect();
        assert_eq!(
            names,
            [
                "run-2026-04-24_12-00-00",
                "run-2026-04-24_11-00-00",
                "run-2026-04-24_10-00-00"
            ]
        );
        assert_eq!(latest_run(root.path()).unwrap().unwrap().name(), names[0]);
    }

    #[test]
    fn same_second_runs_get_distinct_names() {
        let root = tempfile::tempdir().unwrap();
        let a = create_run(root.path(), at(10, 0, 0)).unwrap();
        let b = create_run(root.path(), at(10, 0, 0)).unwrap();
        assert_ne!(a.path, b.path);
        assert_eq!(b.name(), "run-2026-04-24_10-00-01");
    }

    #[test]
    fn missing_root_is_empty() {
        let root = tempfile::tempdir().unwrap();
        assert!(list_runs(&root.path().join("nope")).unwrap().is_empty());
    }
}
