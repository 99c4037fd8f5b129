//! The pipeline's data steps: downloads → dedup → filter → build_shards → stats →
//! precompute.
//! Each reads the resolved config and the data root, writes its outputs under the data
//! root atomically with a manifest last, and skips itself when nothing changed.

pub mod dedup;
pub mod documents;
pub mod downloads;
pub mod filter;
mod http;
pub mod manifest;
pub mod precompute;
pub mod records;
pub mod settings;
pub mod shards;
pub mod stage;
pub mod stats;
pub mod step;

use anyhow::{Context, Result};

use crate::cli::StepArgs;
use lavender::pipeline_step::PipelineStep;
use settings::Settings;
use step::Ctx;

/// Run one data step; a failure is also recorded as a `failed` event of the run
/// (`failure::record_step_failure`), which lavenderd reads.
pub fn run(step: PipelineStep, args: &StepArgs) -> Result<()> {
    // A config rejected on loading is the step's failure too.
    let settings = Settings::load(args).inspect_err(|e| {
        if let Some(run_dir) = &args.run_dir
            && std::fs::create_dir_all(run_dir).is_ok()
        {
            crate::failure::record_step_failure(run_dir, step.as_str(), e);
        }
    })?;
    let ctx = Ctx::new(settings)?;
    if let Some(run_dir) = &ctx.settings.run_dir {
        crate::progress::beat_into(run_dir);
        crate::progress::beat(step.as_str(), 0);
    }
    let result = match step {
        PipelineStep::Downloads => downloads::run(&ctx),
        PipelineStep::Dedup => dedup::run(&ctx),
        PipelineStep::Filter => filter::run(&ctx),
        PipelineStep::BuildShards => shards::run(&ctx),
        PipelineStep::Stats => stats::run(&ctx),
        PipelineStep::Precompute => precompute::run(&ctx),
        PipelineStep::Train | PipelineStep::MineHard => {
            anyhow::bail!("{step} is not a data step (its kind is {:?})", step.kind())
        }
    };
    if let (Err(e), Some(run_dir)) = (&result, &ctx.settings.run_dir) {
        crate::failure::record_step_failure(run_dir, step.as_str(), e);
    }
    result.with_context(|| {
        format!(
            "{} did not complete; its earlier output under {} is unchanged",
            step.as_str(),
            ctx.root.display()
        )
    })
}
