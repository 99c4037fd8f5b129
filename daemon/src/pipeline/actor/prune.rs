//! Old runs pruned by the actor (`lavenderd prune` through the API, and
//! `supervisor.keep_runs` when a pipeline finishes), on the blocking pool: the
//! actor knows the run it is starting or running, and a start that comes while runs
//! are being deleted waits until they are (`held_starts`), so a prune never deletes
//! the run a start makes or resumes from.

use std::path::PathBuf;

use lavender_api::{PruneReply, PruneRequest};
use tokio::sync::oneshot;

use super::{Actor, Input, Pruned};
use crate::old_runs::Delete;

type PruneAnswer = oneshot::Sender<Result<PruneReply, String>>;

impl Actor {
    /// A prune asked through the API: never the run being started or run.
    pub(super) fn prune(&mut self, req: PruneRequest, reply: Option<PruneAnswer>) {
        let delete = req.delete.map_or(Delete::Nothing, Delete::Named);
        let active = self.run_in_use();
        self.prune_runs(req.keep_runs, active, delete, reply);
    }

    /// The run a prune must keep besides the newest: the pipeline's while a worker
    /// runs, is launched, or a restart is pending.
    fn run_in_use(&self) -> Option<PathBuf> {
        let busy = self.record.is_active()
            || self.record.worker().is_some()
            || !matches!(self.phase, crate::pipeline::machine::Phase::Idle);
        self.record.run_dir.clone().filter(|_| busy)
    }

    /// Plans (and deletes what `delete` says) on the blocking pool; reports back
    /// with a [`Pruned`].
    pub(super) fn prune_runs(
        &mut self,
        keep_runs: usize,
        active: Option<PathBuf>,
        delete: Delete,
        reply: Option<PruneAnswer>,
    ) {
        // Only a prune that deletes holds starts back; a plan deletes nothing.
        let holds = delete != Delete::Nothing;
        self.prunes_in_flight += usize::from(holds);
        let root = self.layout.checkpoints_root();
        let done = self.reports.clone();
        tokio::spawn(async move {
            let result = tokio::task::spawn_blocking(move || {
                crate::old_runs::prune(&root, keep_runs, active.as_deref(), &delete)
                    .map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(format!("the prune ended early: {e}")));
            done.send(Input::Pruned(Pruned {
                result,
                keep_runs,
                holds,
                reply,
            }));
        });
    }

    /// A prune done: said (logged, answered), and the starts it held go on.
    pub(super) fn on_pruned(&mut self, p: Pruned) {
        self.prunes_in_flight = self.prunes_in_flight.saturating_sub(usize::from(p.holds));
        let who = match p.reply {
            Some(_) => format!("prune --keep-runs {}", p.keep_runs),
            None => format!("keep_runs {}", p.keep_runs),
        };
        match &p.result {
            Ok(r) if !r.removed.is_empty() => tracing::info!(
                "{who}: removed {} old run(s), freed {} bytes ({})",
                r.removed.len(),
                r.bytes_freed,
                r.removed.join(", ")
            ),
            Ok(_) => tracing::info!("{who}: no old run to remove"),
            Err(e) => tracing::warn!("{who}: {e}"),
        }
        if let Some(reply) = p.reply {
            let _ = reply.send(p.result);
        }
        if self.prunes_in_flight == 0 {
            for start in std::mem::take(&mut self.held_starts) {
                self.on_fingerprinted(start);
            }
        }
    }
}
