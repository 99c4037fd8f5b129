//! `lavenderd incidents [--json] [--last N]`: the decision log, from the file.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::decisions;
use crate::settings::Settings;

pub fn run(settings: &Settings, json: bool, last: Option<usize>) -> Result<ExitCode> {
    let path = decisions::path(&settings.layout);
    let (mut entries, skipped) = decisions::read(&path)
        .with_context(|| format!("cannot read the decision log {}", path.display()))?;
    if let Some(n) = last {
        entries.drain(..entries.len().saturating_sub(n));
    }
    if skipped > 0 {
        eprintln!(
            "{skipped} line(s) of {} (or its rotated files) could not be read and were skipped",
            path.display()
        );
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
    } else if entries.is_empty() {
        println!(
            "no decisions recorded in {}: the daemon has not acted on its own",
            path.display()
        );
    } else {
        print!("{}", decisions::show::text(&entries));
    }
    Ok(ExitCode::SUCCESS)
}
