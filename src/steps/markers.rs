//! Done-markers: `<state>/done/chunk<N>/<step>`, written when a step exits
//! successfully, so a restarted pipeline skips what is already done. Each records
//! the step's inputs as they were when it ran ([`StepInputs`]: the config keys it
//! reads, the manifests of what it read), so a `start` after they changed runs the
//! step again. The run directory is recorded relative to the data root (see
//! `Layout::to_recorded`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::inputs::StepInputs;
use crate::config::PipelineStep;
use crate::error::{Error, Result};
use crate::layout::Layout;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoneMarker {
    pub step: PipelineStep,
    pub chunk: u32,
    pub finished_at: String,
    pub run_dir: Option<PathBuf>,
    /// One hash of [`DoneMarker::inputs`]; absent in markers written before inputs
    /// were recorded (those count as unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<StepInputs>,
}

pub fn read(layout: &Layout, chunk: u32, step: PipelineStep) -> Option<DoneMarker> {
    let bytes = std::fs::read(layout.done_marker(chunk, step)).ok()?;
    let mut marker: DoneMarker = serde_json::from_slice(&bytes).ok()?;
    marker.run_dir = marker.run_dir.map(|p| layout.resolve_recorded(&p));
    Some(marker)
}

pub fn write(
    layout: &Layout,
    chunk: u32,
    step: PipelineStep,
    run_dir: Option<&Path>,
    inputs: Option<StepInputs>,
) -> Result<()> {
    let path = layout.done_marker(chunk, step);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
    }
    let marker = DoneMarker {
        step,
        chunk,
        finished_at: crate::time::rfc3339_z(crate::time::now_utc()),
        run_dir: run_dir.map(|p| layout.to_recorded(p)),
        inputs_hash: inputs.as_ref().map(StepInputs::hash),
        inputs,
    };
    crate::atomic::write_json(&path, &marker)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Markers written before inputs were recorded still read, with none.
    #[test]
    fn a_marker_without_inputs_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().to_path_buf(), None);
        let path = layout.done_marker(1, PipelineStep::Dedup);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            r#"{"step":"dedup","chunk":1,"finished_at":"2026-01-01T00:00:00Z","run_dir":null}"#,
        )
        .unwrap();
        let m = read(&layout, 1, PipelineStep::Dedup).unwrap();
        assert_eq!((m.inputs, m.inputs_hash), (None, None));
    }
}
