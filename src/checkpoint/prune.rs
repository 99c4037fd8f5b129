//! `prune_runs`: keep the newest N run directories, never the active one, nor a
//! run either resumed from.

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

/// The run directories [`prune_runs`] would delete: all but the newest `keep_runs`
/// and `active`, and never a run one of those resumed from, however far back (its
/// chain, `run::chain`: the sessions of one training stay together); oldest last,
/// as listed. A kept run whose chain cannot be read (a `lineage.json` unreadable or
/// malformed) fails the plan, naming the file: nothing is deleted on a guess.
pub fn prune_plan(
    checkpoints_root: &Path,
    keep_runs: usize,
    active: Option<&Path>,
) -> Result<Vec<PathBuf>> {
    let runs = run::list_runs(checkpoints_root)?;
    let mut kept: Vec<PathBuf> = Vec::new();
    for r in runs
        .iter()
        .take(keep_runs)
        .map(|r| r.path.clone())
        .chain(active.map(Path::to_path_buf))
    {
        kept.extend(run::try_chain(&r)?);
    }
    Ok(runs
        .into_iter()
        .filter(|r| !kept.iter().any(|k| same_dir(k, &r.path)))
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

    /// `n` runs under `root`, an hour apart, oldest first.
    fn hourly_runs(root: &Path, n: u32) -> Vec<PathBuf> {
        (0..n)
            .map(|h| {
                run::create_run(root, Utc.with_ymd_and_hms(2026, 1, 1, h, 0, 0).unwrap())
                    .unwrap()
                    .path
            })
            .collect()
    }

    #[test]
    fn a_kept_run_keeps_the_runs_it_resumed_from() {
        let root = tempfile::tempdir().unwrap();
        let runs = hourly_runs(root.path(), 5);
        // runs[4] resumed runs[2], which resumed runs[0]; runs[1] and runs[3] stand alone.
        run::record_parent(&runs[2], &runs[0].join("pretrain-00-00-00-0002")).unwrap();
        run::record_parent(&runs[4], &runs[2].join("pretrain-02-00-00-0004")).unwrap();
        let plan = prune_plan(root.path(), 1, None).unwrap();
        assert_eq!(plan, vec![runs[3].clone(), runs[1].clone()]);
        // Once the chain's newest run falls out of keep_runs, the chain goes too.
        run::record_parent(&runs[3], &runs[1].join("x-0001")).unwrap();
        fs::remove_dir_all(&runs[4]).unwrap();
        let plan = prune_plan(root.path(), 1, None).unwrap();
        assert_eq!(plan, vec![runs[2].clone(), runs[0].clone()]);
    }

    /// A lineage that cannot be read does not cut the chain: the plan fails naming
    /// the file and what to do, and `prune_runs` deletes nothing.
    #[test]
    fn a_lineage_that_cannot_be_read_stops_the_prune() {
        let root = tempfile::tempdir().unwrap();
        let runs = hourly_runs(root.path(), 3);
        // runs[2] resumed runs[1], which resumed runs[0]; runs[1]'s lineage is damaged.
        run::record_parent(&runs[1], &runs[0].join("pretrain-00-00-00-0002")).unwrap();
        run::record_parent(&runs[2], &runs[1].join("pretrain-01-00-00-0004")).unwrap();
        let damaged = run::lineage_path(&runs[1]);
        fs::write(&damaged, "{\"resumed_from\": ").unwrap();
        let err = prune_plan(root.path(), 1, None).unwrap_err().to_string();
        assert!(
            err.contains(&damaged.display().to_string())
                && err.contains("repair that lineage.json")
                && err.contains("then try again"),
            "{err}"
        );
        assert!(prune_runs(root.path(), 1, None).is_err());
        assert!(runs.iter().all(|r| r.is_dir()), "nothing deleted");
        // Unreadable (not a file: a folder in its place) stops it as well.
        fs::remove_file(&damaged).unwrap();
        fs::create_dir(&damaged).unwrap();
        let err = prune_plan(root.path(), 1, None).unwrap_err().to_string();
        assert!(err.contains(&damaged.display().to_string()), "{err}");
        // Repaired: the chain is kept whole, nothing to delete.
        fs::remove_dir(&damaged).unwrap();
        run::record_parent(&runs[1], &runs[0].join("pretrain-00-00-00-0002")).unwrap();
        assert_eq!(
            prune_plan(root.path(), 1, None).unwrap(),
            Vec::<PathBuf>::new()
        );
    }
}
