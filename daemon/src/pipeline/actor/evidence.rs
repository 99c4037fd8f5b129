//! A hung worker's evidence (`crate::evidence`), taken before its SIGTERM: on the
//! blocking pool, within the capture's budget; the kill waits for its report (or
//! the budget and a margin, whichever comes first). The bundle is named in the
//! kill's log line, the decision log, the "hung" push and `pipeline.recovery`.

use std::path::PathBuf;
use std::time::Duration;

use lavender::pipeline_file::WorkerHandle;

use super::{Actor, Input};
use crate::evidence::{self, Request};
use crate::pipeline::handle::HungReport;

/// What the capture reports back.
pub(in crate::pipeline) struct HangEvidence {
    report: HungReport,
    bundle: Option<PathBuf>,
}

/// Beyond the capture's own budget, before the kill goes ahead without it.
const MARGIN: Duration = Duration::from_secs(2);

impl Actor {
    /// Starts the capture for `report` and returns true, or false when there is
    /// nothing to capture (`supervisor.hang_evidence: false`, a Slurm job).
    pub(super) fn capture_hang(&mut self, report: &HungReport) -> bool {
        let WorkerHandle::Local(worker) = &report.worker else {
            return false;
        };
        if !self.config.supervisor.hang_evidence
            || !self
                .phase
                .worker()
                .is_some_and(|w| w.handle.same_as(&report.worker))
        {
            return false;
        }
        let req = Request {
            what: "hang",
            note: super::hung::hung_text(report),
            worker: worker.clone(),
            run_dir: self.record.run_dir.clone(),
            fallback: self.layout.state_dir.clone(),
            log_file: self.record.log_file.clone(),
            tool_dirs: tool_dirs(),
        };
        let done = self.reports.clone();
        let report = report.clone();
        tracing::info!(worker = %report.worker, "taking the hung worker's stacks before killing it");
        tokio::spawn(async move {
            let capture = tokio::task::spawn_blocking(move || evidence::capture(&req));
            let bundle = match tokio::time::timeout(evidence::BUDGET + MARGIN, capture).await {
                Ok(Ok(Ok(bundle))) => Some(bundle.dir),
                Ok(Ok(Err(e))) => {
                    tracing::error!("cannot write the hang's evidence: {e}");
                    None
                }
                Ok(Err(e)) => {
                    tracing::error!("the hang's evidence capture failed: {e}");
                    None
                }
                Err(_) => {
                    tracing::error!(
                        "the hang's evidence took longer than {:?}; killing without it",
                        evidence::BUDGET + MARGIN
                    );
                    None
                }
            };
            done.send(Input::Evidence(HangEvidence { report, bundle }));
        });
        true
    }

    /// The evidence is in (or given up on): the hung worker is killed now.
    pub(super) fn on_hang_evidence(&mut self, ev: HangEvidence) {
        if let Some(dir) = &ev.bundle {
            tracing::warn!(worker = %ev.report.worker, "the hung worker's evidence: {}", dir.display());
        }
        self.hang_bundle = ev.bundle;
        self.hung_judged(ev.report);
    }

    /// ", evidence in <dir>" when the last hang left a bundle.
    pub(super) fn hang_bundle_text(&self) -> String {
        self.hang_bundle
            .as_ref()
            .map(|d| format!(", evidence in {}", d.display()))
            .unwrap_or_default()
    }
}

/// Where tools are looked for besides PATH and a Python worker's own bin folder:
/// beside this program.
fn tool_dirs() -> Vec<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.to_path_buf()))
        .into_iter()
        .collect()
}
