//! `lavenderd prune --keep-runs N`: delete old run directories, never the active one.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::pipeline::PipelineRecord;
use crate::settings::Settings;

pub fn run(settings: &Settings, keep_runs: usize) -> Result<ExitCode> {
    let layout = &settings.layout;
    let record = PipelineRecord::load(layout)?;
    let active = record
        .run_dir
        .as_deref()
        .filter(|_| record.is_active() || record.worker.is_some());
    let root = layout.checkpoints_root();
    let report = lavender::checkpoint::prune_runs(&root, keep_runs, active)
        .with_context(|| format!("prune runs in {}", root.display()))?;
    for p in &report.removed {
        println!("removed {}", p.display());
    }
    println!(
        "pruned {} run(s), freed {:.1} MiB",
        report.removed.len(),
        report.bytes_freed as f64 / (1u64 << 20) as f64
    );
    Ok(ExitCode::SUCCESS)
}
