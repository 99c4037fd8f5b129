//! A resumed worker's replayed step that differs from the first pass (the replay
//! watcher's report, `crate::replay`): a `resume_mismatch` decision and an alert,
//! and with `supervisor.on_resume_mismatch: stop` the pipeline stopped as an
//! operator's stop would (the worker saves and exits; it stays stopped).

use lavender::config::{OnResumeMismatch, PipelineStep};
use lavender::pipeline_file::{RecordState, StopCause};
use tokio::sync::oneshot;

use super::Actor;
use crate::alert::Alert;
use crate::decisions::{Decision, DecisionKind, Evidence, Mode, Rule};
use crate::pipeline::ResumeMismatch;

impl Actor {
    pub(super) fn on_resume_mismatch(&mut self, report: ResumeMismatch) {
        // A report about a run this pipeline no longer trains is old news.
        if self.record.run_dir.as_deref() != Some(report.run_dir.as_path()) {
            return;
        }
        let action = self.config.supervisor.on_resume_mismatch;
        let stops = action == OnResumeMismatch::Stop
            && matches!(self.record.state, RecordState::Running { .. });
        let message = format!(
            "the run resumed from {} does not train as it did: {} (tolerance: {}); the checkpoint is intact but does not resume the run (a data position, a random state or a schedule not restored)",
            report.checkpoint, report.mismatch, report.tolerance
        );
        let did = match (stops, self.observing()) {
            (true, false) => "alerted and stopped the pipeline (the worker saves and exits)",
            (true, true) => "would have stopped the pipeline; alerted",
            (false, _) => "alerted; training goes on",
        };
        let mut decision = Decision::new(
            DecisionKind::ResumeMismatch,
            PipelineStep::Train,
            Evidence {
                last_step: Some(report.mismatch.step),
                note: Some(message.clone()),
                ..Evidence::default()
            },
            Rule::new("supervisor.on_resume_mismatch", action),
            did.to_string(),
        );
        if stops && self.observing() {
            decision.mode = Mode::WouldHave;
        }
        self.decisions.record(decision);
        self.alert(Alert::ResumeMismatch {
            step: PipelineStep::Train,
            message,
        });
        if stops && !self.observing() {
            let (reply, _) = oneshot::channel();
            self.stop(None, StopCause::Operator, reply);
        }
    }
}
