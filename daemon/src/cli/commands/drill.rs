//! `lavenderd drill [--run ID] [--checkpoint NAME] [--steps K] [--json]`: a restore
//! drill (`crate::drill`) from the files; no daemon needed. Its verdict is kept
//! beside the checkpoint, which `lavenderd checkpoints` shows.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use crate::checkpoints::inventory;
use crate::drill::Drill;
use crate::settings::Settings;

pub fn run(
    settings: &Settings,
    run: Option<&str>,
    checkpoint: Option<&str>,
    steps: Option<u64>,
    json: bool,
) -> Result<ExitCode> {
    let layout = &settings.layout;
    let run_dir = match run {
        Some(id) => inventory::run_dir(layout, id)?,
        None => lavender::run::latest_run(&layout.checkpoints_root())?
            .map(|r| r.path)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no run to drill under {}",
                    layout.checkpoints_root().display()
                )
            })?,
    };
    let drill = Drill::plan(&settings.config, &run_dir, checkpoint, steps)?;
    if !json {
        println!(
            "drill: resuming {} (step {}) in a sandbox for {} step(s), compared {}",
            drill.checkpoint.name, drill.checkpoint.state.step, drill.steps, drill.tolerance
        );
    }
    let started = std::time::Instant::now();
    let verdict = drill.run(layout, &settings.config)?;
    let seconds = started.elapsed().as_secs_f64();
    if json {
        println!(
            "{}",
            json!({
                "run": run_dir.file_name().map(|n| n.to_string_lossy()),
                "checkpoint": drill.checkpoint.name,
                "steps": drill.steps,
                "seconds": seconds,
                "verdict": verdict,
            })
        );
    } else if verdict.passed {
        println!(
            "drill passed: {} step(s) as the run trained them ({}; largest difference {:.2e}) in {seconds:.1} s; {} is drilled",
            verdict.steps, verdict.tolerance, verdict.largest_difference, drill.checkpoint.name
        );
    } else {
        println!(
            "DRILL FAILED: {} does not resume the run: {} ({})",
            drill.checkpoint.name,
            verdict.mismatch.as_deref().unwrap_or("a step differs"),
            verdict.tolerance
        );
    }
    Ok(if verdict.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
