//! Done-markers: `<state>/done/chunk<N>/<step>`, written when a step exits
//! successfully, so a restarted pipeline skips what is already done. The run
//! directory is recorded relative to the data root (see `Layout::to_recorded`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lavender::config::PipelineStep;
use serde::{Deserialize, Serialize};

use crate::layout::Layout;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoneMarker {
    pub step: PipelineStep,
    pub chunk: u32,
    pub finished_at: String,
    pub run_dir: Option<PathBuf>,
}

pub fn is_done(layout: &Layout, chunk: u32, step: PipelineStep) -> bool {
    layout.done_marker(chunk, step).is_file()
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
) -> Result<()> {
    let path = layout.done_marker(chunk, step);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let marker = DoneMarker {
        step,
        chunk,
        finished_at: lavender::time::rfc3339_z(lavender::time::now_utc()),
        run_dir: run_dir.map(|p| layout.to_recorded(p)),
    };
    lavender::atomic::write_json(&path, &marker)
        .with_context(|| format!("write done-marker {}", path.display()))
}
