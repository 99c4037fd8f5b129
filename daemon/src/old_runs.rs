//! Old runs pruned (`lavenderd prune`, `supervisor.keep_runs`): the plan of
//! `lavender::checkpoint::prune_plan`, then exactly the confirmed runs of it deleted.
//! One path for the daemon's actor (which passes the run it is starting or running as
//! `active` and holds starts back meanwhile) and for the CLI without a daemon.

use std::path::{Path, PathBuf};

use lavender_api::PruneReply;

/// What a prune deletes of its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delete {
    /// Nothing: the plan alone.
    Nothing,
    /// Every run of the plan (`supervisor.keep_runs`, nobody to ask).
    All,
    /// These runs, by name, where the plan still holds them.
    Named(Vec<String>),
}

/// Plans the prune of `checkpoints_root` keeping `keep_runs` runs besides `active`
/// and deletes what `delete` says. Slow (sizes, deletes): on the blocking pool.
pub(crate) fn prune(
    checkpoints_root: &Path,
    keep_runs: usize,
    active: Option<&Path>,
    delete: &Delete,
) -> lavender::error::Result<PruneReply> {
    let plan = lavender::checkpoint::prune_plan(checkpoints_root, keep_runs, active)?;
    let mut reply = PruneReply {
        planned: plan.iter().map(|p| name(p)).collect(),
        bytes: plan.iter().map(|p| lavender::checkpoint::dir_size(p)).sum(),
        ..PruneReply::default()
    };
    let doomed: Vec<PathBuf> = match delete {
        Delete::Nothing => return Ok(reply),
        Delete::All => plan,
        Delete::Named(names) => {
            reply.kept = names
                .iter()
                .filter(|n| !reply.planned.contains(n))
                .cloned()
                .collect();
            plan.into_iter()
                .filter(|p| names.contains(&name(p)))
                .collect()
        }
    };
    let report = lavender::checkpoint::remove_runs(&doomed)?;
    reply.removed = report.removed.iter().map(|p| name(p)).collect();
    reply.bytes_freed = report.bytes_freed;
    Ok(reply)
}

fn name(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
}
