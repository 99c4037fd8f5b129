//! `lavenderd prune --keep-runs N [--yes]`: delete old run directories, never the
//! active one. It names what it would delete and asks first (`--yes` without a
//! terminal); it deletes exactly what it named.

use std::process::ExitCode;

use anyhow::{Context, Result};
use lavender::pipeline_file::PipelineRecord;

use crate::confirm::confirm;
use crate::settings::Settings;

pub fn run(settings: &Settings, keep_runs: usize, yes: bool) -> Result<ExitCode> {
    let layout = &settings.layout;
    let record = PipelineRecord::load(layout)?;
    let active = record
        .run_dir
        .as_deref()
        .filter(|_| record.is_active() || record.worker.is_some());
    let root = layout.checkpoints_root();
    let doomed = lavender::checkpoint::prune_plan(&root, keep_runs, active)
        .with_context(|| format!("list runs in {}", root.display()))?;
    if doomed.is_empty() {
        println!(
            "nothing to prune: {} holds at most {keep_runs} run(s) besides the active one",
            root.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let bytes: u64 = doomed
        .iter()
        .map(|p| lavender::checkpoint::dir_size(p))
        .sum();
    let names: Vec<String> = doomed
        .iter()
        .map(|p| {
            p.file_name()
                .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
        })
        .collect();
    confirm(
        &format!(
            "delete {} run(s) under {} ({}, {})",
            doomed.len(),
            root.display(),
            names.join(", "),
            mib(bytes)
        ),
        yes,
    )?;
    let report = lavender::checkpoint::remove_runs(&doomed)
        .with_context(|| format!("prune runs in {}", root.display()))?;
    for p in &report.removed {
        println!("removed {}", p.display());
    }
    println!(
        "pruned {} run(s), freed {}",
        report.removed.len(),
        mib(report.bytes_freed)
    );
    Ok(ExitCode::SUCCESS)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}
