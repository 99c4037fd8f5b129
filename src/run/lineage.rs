//! A run's lineage: a resume opens a new run directory per session, and the new run
//! records where it came from in `<run>/lineage.json` (`{resumed_from,
//! parent_run, parent_checkpoint}`), written by whoever creates the run (the daemon,
//! at `start --resume`). Following the parents gives the chain of sessions that
//! together are one training, oldest first: what `lavenderd runs` shows, what
//! pruning keeps together and what `export --all` and attribution cover.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::parse_run_name;
use crate::error::{Error, IoContext, Result};

/// File name inside a run directory.
pub const LINEAGE_FILE: &str = "lineage.json";

/// Where a run's training came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    /// The checkpoint the run resumed from, as resolved when it started.
    pub resumed_from: PathBuf,
    /// The run directory holding that checkpoint, by name, when it is a run
    /// beside this one (`None`: a checkpoint from elsewhere).
    pub parent_run: Option<String>,
    /// The checkpoint's directory name.
    pub parent_checkpoint: String,
    /// The first run of the chain (the one that started afresh), kept as the chain
    /// grows so it survives the parents' pruning and a restore that brings back one
    /// run folder alone: the training's identity (`lineage_root`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_run: Option<String>,
}

/// `<run_dir>/lineage.json`.
pub fn lineage_path(run_dir: &Path) -> PathBuf {
    run_dir.join(LINEAGE_FILE)
}

/// Records that `run_dir` resumes from the checkpoint `resumed_from`. Nothing to
/// record (`Ok(None)`) when the checkpoint is the run's own.
pub fn record_parent(run_dir: &Path, resumed_from: &Path) -> Result<Option<Lineage>> {
    let holder = resumed_from.parent();
    if holder.is_some_and(|h| same_dir(h, run_dir)) {
        return Ok(None);
    }
    let beside = holder.filter(|h| {
        h.parent()
            .zip(run_dir.parent())
            .is_some_and(|(a, b)| same_dir(a, b))
    });
    let parent_run = beside
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| parse_run_name(n).is_ok());
    let root_run = beside
        .zip(parent_run.as_ref())
        .map(|(dir, name)| lineage_root_or(dir, name));
    let lineage = Lineage {
        resumed_from: resumed_from.to_path_buf(),
        root_run,
        parent_run,
        parent_checkpoint: resumed_from
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    crate::atomic::write_json(&lineage_path(run_dir), &lineage)?;
    Ok(Some(lineage))
}

/// The name of the run that started the training `run_dir` continues: its recorded
/// `root_run`, else the oldest run of its [`chain`] (a lineage written before
/// `root_run` was), else its own name.
pub fn lineage_root(run_dir: &Path) -> String {
    let own = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    lineage_root_or(run_dir, &own)
}

fn lineage_root_or(run_dir: &Path, own: &str) -> String {
    match read_lineage(run_dir).ok().flatten() {
        Some(Lineage {
            root_run: Some(root),
            ..
        }) => root,
        Some(_) => names(&chain(run_dir))
            .pop()
            .unwrap_or_else(|| own.to_string()),
        None => own.to_string(),
    }
}

/// The lineage `run_dir` recorded; `Ok(None)` for a run that started afresh.
pub fn read_lineage(run_dir: &Path) -> Result<Option<Lineage>> {
    let path = lineage_path(run_dir);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).ctx("read the run's lineage", &path),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::Malformed {
            path: path.clone(),
            reason: crate::heartbeat::json_reason(&e),
        })
}

/// The run `run_dir` resumed from, when it is a run directory beside it that
/// still exists; `None` as well when its lineage cannot be read (see [`try_parent`]).
pub fn parent(run_dir: &Path) -> Option<PathBuf> {
    try_parent(run_dir).ok().flatten()
}

/// [`parent`], with a lineage that cannot be read (unreadable, malformed) an error
/// naming the file.
fn try_parent(run_dir: &Path) -> Result<Option<PathBuf>> {
    let Some(name) = read_lineage(run_dir)?.and_then(|l| l.parent_run) else {
        return Ok(None);
    };
    Ok(run_dir
        .parent()
        .map(|up| up.join(name))
        .filter(|dir| dir.is_dir()))
}

/// The runs that together trained `run_dir`, oldest first, ending with `run_dir`:
/// each resumed from a checkpoint of the one before. The chain stops at a run that
/// started afresh, resumed from elsewhere, or whose parent was deleted; for a view,
/// also at a lineage that cannot be read (what deletes runs uses [`try_chain`]).
pub fn chain(run_dir: &Path) -> Vec<PathBuf> {
    walk_chain(run_dir, |r| Ok(parent(r))).unwrap_or_else(|_| vec![run_dir.to_path_buf()])
}

/// [`chain`], failing on a lineage that cannot be read: a run deleted because the
/// chain was cut there may be one a kept run resumed from.
pub fn try_chain(run_dir: &Path) -> Result<Vec<PathBuf>> {
    walk_chain(run_dir, try_parent).map_err(|e| Error::Lineage {
        run: run_dir.to_path_buf(),
        source: Box::new(e),
    })
}

fn walk_chain(
    run_dir: &Path,
    parent_of: impl Fn(&Path) -> Result<Option<PathBuf>>,
) -> Result<Vec<PathBuf>> {
    let mut runs = vec![run_dir.to_path_buf()];
    let mut seen: HashSet<PathBuf> = HashSet::from([run_dir.to_path_buf()]);
    while let Some(up) = parent_of(runs.last().expect("the chain holds run_dir"))? {
        // A lineage edited into a loop ends where it repeats.
        if !seen.insert(up.clone()) {
            break;
        }
        runs.push(up);
    }
    runs.reverse();
    Ok(runs)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The directory names of `runs` (a [`chain`]'s, for the status and the run list).
pub fn names(runs: &[PathBuf]) -> Vec<String> {
    runs.iter()
        .map(|r| {
            r.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::super::create_run;
    use super::*;

    fn run_at(root: &Path, h: u32) -> PathBuf {
        create_run(root, Utc.with_ymd_and_hms(2026, 1, 1, h, 0, 0).unwrap())
            .unwrap()
            .path
    }

    #[test]
    fn a_resumed_run_names_its_parent_and_the_chain_follows_them() {
        let root = tempfile::tempdir().unwrap();
        let a = run_at(root.path(), 1);
        let b = run_at(root.path(), 2);
        let c = run_at(root.path(), 3);
        assert_eq!(chain(&a), vec![a.clone()]);
        let from_a = a.join("pretrain-01-00-00-0003");
        let l = record_parent(&b, &from_a).unwrap().unwrap();
        assert_eq!(l.parent_run.as_deref(), Some("run-2026-01-01_01-00-00"));
        assert_eq!(l.parent_checkpoint, "pretrain-01-00-00-0003");
        assert_eq!(read_lineage(&b).unwrap(), Some(l));
        record_parent(&c, &b.join("pretrain-02-00-00-0007")).unwrap();
        assert_eq!(chain(&c), vec![a.clone(), b.clone(), c.clone()]);
        assert_eq!(chain(&b), vec![a.clone(), b.clone()]);
        // A restart from the run's own checkpoint is no lineage.
        assert_eq!(record_parent(&a, &a.join("x-0001")).unwrap(), None);
        assert_eq!(read_lineage(&a).unwrap(), None);
        // A deleted parent ends the chain there.
        fs::remove_dir_all(&a).unwrap();
        assert_eq!(chain(&c), vec![b.clone(), c.clone()]);
    }

    #[test]
    fn a_checkpoint_from_elsewhere_is_recorded_without_a_parent_run() {
        let root = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let b = run_at(root.path(), 2);
        let l = record_parent(&b, &other.path().join("ckpt"))
            .unwrap()
            .unwrap();
        assert_eq!(l.parent_run, None);
        assert_eq!(chain(&b), vec![b.clone()]);
    }

    #[test]
    fn a_lineage_loop_ends_and_a_bad_file_names_itself() {
        let root = tempfile::tempdir().unwrap();
        let a = run_at(root.path(), 1);
        let b = run_at(root.path(), 2);
        record_parent(&a, &b.join("c-1")).unwrap();
        record_parent(&b, &a.join("c-1")).unwrap();
        assert_eq!(chain(&b), vec![a.clone(), b.clone()]);
        fs::write(lineage_path(&a), "{").unwrap();
        let err = read_lineage(&a).unwrap_err().to_string();
        assert!(err.contains("lineage.json"), "{err}");
    }

    /// The root a chain started with is kept as it grows: after the parents are
    /// gone (pruned, or a restore that brought back one run folder), the newest run
    /// still names it.
    #[test]
    fn the_root_run_survives_the_parents() {
        let root = tempfile::tempdir().unwrap();
        let runs: Vec<PathBuf> = [
            "run-2026-01-01_00-00-00",
            "run-2026-01-01_01-00-00",
            "run-2026-01-01_02-00-00",
        ]
        .iter()
        .map(|n| root.path().join(n))
        .collect();
        for r in &runs {
            std::fs::create_dir_all(r.join("pretrain-00-00-00-0001")).unwrap();
        }
        assert_eq!(lineage_root(&runs[0]), "run-2026-01-01_00-00-00");
        record_parent(&runs[1], &runs[0].join("pretrain-00-00-00-0001")).unwrap();
        record_parent(&runs[2], &runs[1].join("pretrain-00-00-00-0001")).unwrap();
        std::fs::remove_dir_all(&runs[0]).unwrap();
        std::fs::remove_dir_all(&runs[1]).unwrap();
        assert_eq!(lineage_root(&runs[2]), "run-2026-01-01_00-00-00");
    }
}
