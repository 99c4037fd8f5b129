//! `prune_runs`: keep the newest N run directories, never the active one.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::run;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PruneReport {
    pub removed: Vec<PathBuf>,
    pub bytes_freed: u64,
}

/// Total size of the files under `path`; entries that vanish meanwhile count as 0.
pub fn dir_size(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    fs::read_dir(path)
        .map(|entries| entries.flatten().map(|e| dir_size(&e.path())).sum())
        .unwrap_or(0)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The run directories [`prune_runs`] would delete: all but the newest `keep_runs`,
/// never `active`; oldest last, as listed.
pub fn prune_plan(
    checkpoints_root: &Path,
    keep_runs: usize,
    active: Option<&Path>,
) -> Result<Vec<PathBuf>> {
    Ok(run::list_runs(checkpoints_root)?
        .into_iter()
        .skip(keep_runs)
        .filter(|r| !active.is_some_and(|a| same_dir(a, &r.path)))
        .map(|r| r.path)
        .collect())
}

/// Deletes exactly these run directories (one already gone counts as removed by
/// someone else, not as an error).
pub fn remove_runs(runs: &[PathBuf]) -> Result<PruneReport> {
    let mut report = PruneReport::default();
    for path in runs {
        let size = dir_size(path);
        match fs::remove_dir_all(path) {
            Ok(()) => {
                report.bytes_freed += size;
                report.removed.push(path.clone());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("delete run", path, e)),
        }
    }
    Ok(report)
}

/// Keeps the newest `keep_runs` run directories, never deleting `active`.
pub fn prune_runs(
    checkpoints_root: &Path,
    keep_runs: usize,
    active: Option<&Path>,
) -> Result<PruneReport> {
    remove_runs(&prune_plan(checkpoints_root, keep_runs, active)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn keeps_newest_and_never_the_active_run() {
        let root = tempfile::tempdir().unwrap();
        let runs: Vec<_> = (0..4)
            .map(|h| {
                let r = run::create_run(
                    root.path(),
                    Utc.with_ymd_and_hms(2026, 1, 1, h, 0, 0).unwrap(),
                )
                .unwrap();
                fs::write(r.path.join("train.log"), vec![b'x'; 100]).unwrap();
                r.path
            })
            .collect();
        // The oldest run is the active one (e.g. a resumed long run).
        let report = prune_runs(root.path(), 1, Some(&runs[0])).unwrap();
        assert_eq!(report.removed, vec![runs[2].clone(), runs[1].clone()]);
        assert_eq!(report.bytes_freed, 200);
        assert!(runs[0].exists() && runs[3].exists());
        // keep 0 with an active run: only the active survives.
        let report = prune_runs(root.path(), 0, Some(&runs[0])).unwrap();
        assert_eq!(report.removed, vec![runs[3].clone()]);
        assert!(runs[0].exists());
    }
}
