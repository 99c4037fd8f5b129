//! `lavenderd resolve`: [`lavender_export::resolve`] on the checkpoints named; it
//! reads no data root.

use std::process::ExitCode;

use anyhow::Result;
use lavender_export::{ResolveOptions, parse_list};

use crate::cli::ResolveArgs;

pub fn run(args: ResolveArgs) -> Result<ExitCode> {
    let list =
        |option, spec: Option<String>| spec.as_deref().map(|s| parse_list(option, s)).transpose();
    let step_size_list = list("--step-size-list", args.step_size_list)?
        .map(|l| {
            l.into_iter()
                .map(|n| {
                    (n >= 0.0 && n.fract() == 0.0)
                        .then_some(n as u64)
                        .ok_or_else(|| anyhow::anyhow!("--step-size-list: {n} is not a step count"))
                })
                .collect::<Result<Vec<u64>>>()
        })
        .transpose()?;
    let r = lavender_export::resolve(&ResolveOptions {
        checkpoints: args.checkpoints,
        model_path: args.model_path,
        momentum: args.momentum,
        step_lrs: list("--step-lrs", args.step_lrs)?,
        segments: args.segments,
        lr_list: list("--lr-list", args.lr_list)?,
        step_size_list,
        use_adam_preconditioner: args.use_adam_preconditioner,
    })?;
    print!(
        "{}",
        if args.json {
            lavender_export::resolve_json(&r)
        } else {
            lavender_export::resolve_yaml(&r)
        }
    );
    Ok(ExitCode::SUCCESS)
}
