//! Runs and checkpoints as the API and the CLI list them.

use std::path::PathBuf;

use anyhow::{Context, Result};
use lavender_api::{CheckpointInfo, RunInfo, Verification};

use lavender::checkpoint::contents::Verdict;
use lavender::checkpoint::verdicts::{self, Check};
use lavender::layout::Layout;

/// Runs, newest first.
pub fn runs(layout: &Layout) -> Result<Vec<RunInfo>> {
    let root = layout.checkpoints_root();
    let runs = lavender::run::list_runs(&root)
        .with_context(|| format!("list runs in {}", root.display()))?;
    Ok(runs
        .into_iter()
        .map(|r| {
            let ckpts = lavender::checkpoint::list_run_checkpoints(&r.path).unwrap_or_default();
            let lineage = lavender::run::read_lineage(&r.path).ok().flatten();
            let chain = lavender::run::chain(&r.path);
            RunInfo {
                name: r.name(),
                started: format!("{}Z", r.started.format("%Y-%m-%dT%H:%M:%S")),
                checkpoints: ckpts.len() as u64,
                latest_checkpoint: ckpts.last().map(|c| c.name.clone()),
                resumed_from: lineage.map(|l| resumed_text(&l)),
                chain: if chain.len() > 1 {
                    lavender::run::names(&chain)
                } else {
                    Vec::new()
                },
                path: r.path,
            }
        })
        .collect())
}

/// `run-…/checkpoint` for another run's checkpoint, else the checkpoint's path.
pub fn resumed_text(l: &lavender::run::Lineage) -> String {
    match &l.parent_run {
        Some(run) => format!("{run}/{}", l.parent_checkpoint),
        None => l.resumed_from.display().to_string(),
    }
}

/// The directory of run `id` (a run name or path), which must exist.
pub fn run_dir(layout: &Layout, id: &str) -> Result<PathBuf> {
    let root = layout.checkpoints_root();
    let as_path = PathBuf::from(id);
    let dir = if as_path.is_absolute() {
        as_path
    } else {
        root.join(id)
    };
    if !dir.is_dir() {
        anyhow::bail!(
            "no run {id:?} under {}; `lavenderd runs` lists them",
            root.display()
        );
    }
    Ok(dir)
}

/// Complete checkpoints of run `run` (a run name or path; default: the newest run), oldest first.
pub fn checkpoints(layout: &Layout, run: Option<&str>) -> Result<Vec<CheckpointInfo>> {
    let root = layout.checkpoints_root();
    let run_dir = match run {
        Some(id) => run_dir(layout, id)?,
        None => match lavender::run::latest_run(&root)? {
            Some(r) => r.path,
            None => return Ok(Vec::new()),
        },
    };
    let list = lavender::checkpoint::list_run_checkpoints(&run_dir)
        .with_context(|| format!("list checkpoints in {}", run_dir.display()))?;
    Ok(list
        .into_iter()
        .map(|c| {
            // A verdict of files changed since it was read back shows as pending.
            let check = verdicts::shown(&c);
            CheckpointInfo {
                stage: c.state.stage.clone(),
                step: c.state.step,
                saved_at: c.state.saved_at.clone(),
                loss: c.state.loss,
                val_loss: c.state.val_loss,
                verification: verification(&check),
                damage: matches!(check, Check::Done(Verdict::Damaged { .. }))
                    .then(|| check.describe()),
                remote: None,
                drill: lavender::checkpoint::drills::read(&run_dir, &c.name).map(|d| d.describe()),
                name: c.name,
                path: c.path,
            }
        })
        .collect())
}

/// The API's word for a checkpoint's recorded check.
fn verification(check: &Check) -> Verification {
    match check {
        Check::Pending => Verification::Pending,
        Check::Done(Verdict::Verified { .. }) => Verification::Verified,
        Check::Done(Verdict::Damaged { .. }) => Verification::Damaged,
        Check::Done(Verdict::Unverified) => Verification::Unverified,
    }
}
