//! `lavenderd export`: [`lavender_export::export`] on a run of the data root.

use std::process::ExitCode;

use anyhow::Result;
use lavender_export::{ExportOptions, Selection};

use crate::cli::ExportArgs;
use crate::settings::Settings;

pub fn run(settings: &Settings, args: ExportArgs) -> Result<ExitCode> {
    let run =
        lavender_export::locate_run(&settings.layout.checkpoints_root(), args.run.as_deref())?;
    let selection = if args.all {
        Selection::All
    } else if args.checkpoints.is_empty() {
        Selection::Latest
    } else {
        Selection::Named(args.checkpoints)
    };
    let r = lavender_export::export(&ExportOptions {
        run,
        selection,
        out: args.out,
        force: args.force,
        ema: args.ema,
    })?;
    if args.json {
        let mut out: serde_json::Value = serde_json::from_str(&lavender_export::export_json(&r))?;
        out["data_root"] = settings.data_root.to_json();
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", lavender_export::export_text(&r));
    }
    Ok(ExitCode::SUCCESS)
}
