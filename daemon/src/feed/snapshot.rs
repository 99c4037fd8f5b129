//! What a dashboard needs to draw everything but the curves: the status
//! contract, the steps in pipeline order (the status keeps them in a map), the
//! run the status is about, and the last error.

use lavender::status::{Status, StepState};
use serde::Serialize;

use crate::status::StatusCache;
use lavender::pipeline_file::PipelineRecord;

#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub status: Status,
    pub steps: Vec<StepLine>,
    /// The run directory's name (`run-…`): the id for `/runs/{id}/history`.
    pub run: Option<String>,
    pub last_error: Option<String>,
    /// The refresher's [`crate::status::StatusSnapshot::events_mark`].
    #[serde(skip)]
    pub events_mark: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepLine {
    pub name: String,
    pub state: StepState,
}

impl Snapshot {
    /// The status of `record` (every transition the feed sees, however quickly the
    /// next one follows) composed with the facts of the refresher's latest snapshot:
    /// no file is read here.
    pub fn take(cache: &StatusCache, record: &PipelineRecord) -> Snapshot {
        let snap = cache.snapshot();
        let now = lavender::time::now_utc();
        let status = if snap.record == *record {
            snap.status_at(now)
        } else {
            lavender::compose::compose(
                record,
                &snap.facts,
                &snap.settings,
                now,
                lavender::compose::Liveness::Supervised,
            )
        };
        let run_dir = snap.facts.run_dir.clone();
        Snapshot {
            steps: ordered_steps(record, &status),
            run: run_dir.and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned())),
            last_error: record.last_error.clone(),
            status,
            events_mark: snap.events_mark,
        }
    }
}

/// The record's steps are in the order they run; before a first start only the
/// status's map exists, which is put in the canonical pipeline order.
pub fn ordered_steps(record: &PipelineRecord, status: &Status) -> Vec<StepLine> {
    if !record.steps.is_empty() {
        return record
            .steps
            .iter()
            .map(|s| StepLine {
                name: s.name.to_string(),
                state: s.state,
            })
            .collect();
    }
    status
        .ordered_steps()
        .into_iter()
        .map(|(name, state)| StepLine {
            name: name.to_string(),
            state,
        })
        .collect()
}
