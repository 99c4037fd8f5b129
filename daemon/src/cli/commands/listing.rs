//! `lavenderd runs` and `lavenderd checkpoints [--run ID]`, from the files.

use std::process::ExitCode;

use anyhow::Result;

use crate::checkpoints::inventory;
use crate::settings::Settings;

pub fn runs(settings: &Settings, json: bool) -> Result<ExitCode> {
    let runs = inventory::runs(&settings.layout)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else if runs.is_empty() {
        println!(
            "no runs in {}",
            settings.layout.checkpoints_root().display()
        );
    } else {
        for r in runs {
            println!(
                "{}  {} checkpoint(s)  latest {}",
                r.name,
                r.checkpoints,
                r.latest_checkpoint.as_deref().unwrap_or("-")
            );
            // A resumed run: where it came from, and the whole training it belongs to.
            if let Some(from) = &r.resumed_from {
                println!("    resumed from {from}");
            }
            if !r.chain.is_empty() {
                println!("    chain: {}", r.chain.join(" → "));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn checkpoints(settings: &Settings, run: Option<&str>, json: bool) -> Result<ExitCode> {
    let list = inventory::checkpoints(&settings.layout, run)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else if list.is_empty() {
        println!("no complete checkpoints");
    } else {
        for c in list {
            let check = c
                .damage
                .clone()
                .unwrap_or_else(|| c.verification.as_str().to_string());
            let check = match &c.drill {
                Some(drill) => format!("{check}, {drill}"),
                None => check,
            };
            println!(
                "{}  step {}  stage {}  loss {}  {}  {}",
                c.name,
                c.step,
                c.stage,
                c.loss
                    .map(|l| format!("{l:.4}"))
                    .unwrap_or_else(|| "-".into()),
                check,
                c.path.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
