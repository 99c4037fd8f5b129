//! `lavenderd verify [--run ID | --all] [--json]`: every complete checkpoint checked
//! against its `manifest.json`, every byte read back, as `git fsck` checks a
//! repository. From the files: no daemon needed. Each verdict is recorded beside the
//! checkpoint, as the daemon's verifier records its own.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use lavender::checkpoint::contents::{self, Depth, Hashing, Verdict};
use lavender::checkpoint::verdicts;
use serde::Serialize;

use crate::checkpoints::inventory;
use crate::settings::Settings;

/// One checkpoint's line of the report.
#[derive(Serialize)]
struct Checked {
    run: String,
    checkpoint: String,
    path: PathBuf,
    #[serde(flatten)]
    verdict: Verdict,
}

#[derive(Serialize, Default)]
struct Report {
    checkpoints: Vec<Checked>,
    verified: usize,
    damaged: usize,
    unverified: usize,
    /// Bytes read and hashed, and how long it took (the verify's throughput).
    bytes: u64,
    seconds: f64,
}

pub fn run(settings: &Settings, run: Option<&str>, all: bool, json: bool) -> Result<ExitCode> {
    let layout = &settings.layout;
    let root = layout.checkpoints_root();
    let runs: Vec<PathBuf> = if all {
        lavender::run::list_runs(&root)
            .with_context(|| format!("list runs in {}", root.display()))?
            .into_iter()
            .rev()
            .map(|r| r.path)
            .collect()
    } else if let Some(id) = run {
        vec![inventory::run_dir(layout, id)?]
    } else {
        lavender::run::latest_run(&root)?
            .map(|r| r.path)
            .into_iter()
            .collect()
    };
    let started = Instant::now();
    let mut report = Report::default();
    for run_dir in &runs {
        let run_name = run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let list = lavender::checkpoint::list_run_checkpoints(run_dir)
            .with_context(|| format!("list checkpoints in {}", run_dir.display()))?;
        for c in list {
            // This command's only work: hash on every core, as b3sum does. Recorded
            // as the daemon's verifier does (`checkpoints` shows it after): read again
            // when its files changed meanwhile, nothing recorded when it went away.
            let verdict = match verdicts::verify_and_record_with(&c, Hashing::AllCores) {
                Ok(Some(v)) => v,
                Ok(None) => {
                    eprintln!(
                        "{} went away while it was read back (retention); not counted",
                        c.path.display()
                    );
                    continue;
                }
                Err(e) => {
                    eprintln!("could not record the verdict of {}: {e}", c.path.display());
                    contents::verify_with(&c.path, Depth::Full, None, Hashing::AllCores)
                }
            };
            match &verdict {
                Verdict::Verified { bytes, .. } => {
                    report.verified += 1;
                    report.bytes += bytes;
                }
                Verdict::Damaged { .. } => report.damaged += 1,
                Verdict::Unverified => report.unverified += 1,
            }
            report.checkpoints.push(Checked {
                run: run_name.clone(),
                checkpoint: c.name,
                path: c.path,
                verdict,
            });
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report, &runs);
    }
    Ok(if report.damaged == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_table(report: &Report, runs: &[PathBuf]) {
    if report.checkpoints.is_empty() {
        match runs {
            [] => println!("no runs"),
            [one] => println!("no complete checkpoints in {}", one.display()),
            _ => println!("no complete checkpoints in {} runs", runs.len()),
        }
        return;
    }
    let run_w = report
        .checkpoints
        .iter()
        .map(|c| c.run.len())
        .max()
        .unwrap_or(0)
        .max(3);
    let ck_w = report
        .checkpoints
        .iter()
        .map(|c| c.checkpoint.len())
        .max()
        .unwrap_or(0)
        .max(10);
    println!("{:run_w$}  {:ck_w$}  VERDICT", "RUN", "CHECKPOINT");
    for c in &report.checkpoints {
        let head = format!("{:run_w$}  {:ck_w$}", c.run, c.checkpoint);
        match &c.verdict {
            Verdict::Verified { files, bytes } => {
                println!("{head}  verified ({files} file(s), {})", mb(*bytes))
            }
            Verdict::Unverified if !c.path.join(contents::FILE).is_file() => {
                println!("{head}  unverified (no {})", contents::FILE)
            }
            Verdict::Unverified => println!(
                "{head}  unverified ({} does not list {}: written before the commit marker was covered; its files match)",
                contents::FILE,
                lavender::trainer_state::FILE
            ),
            Verdict::Damaged { damage } => {
                for (i, d) in damage.iter().enumerate() {
                    let lead = if i == 0 {
                        head.as_str()
                    } else {
                        &" ".repeat(head.len())
                    };
                    println!("{lead}  damaged: {d}");
                }
            }
        }
    }
    let rate = if report.seconds > 0.0 {
        format!(" ({:.0} MB/s)", report.bytes as f64 / 1e6 / report.seconds)
    } else {
        String::new()
    };
    println!(
        "{} checkpoint(s): {} verified, {} damaged, {} unverified; {} read in {:.2} s{rate}",
        report.checkpoints.len(),
        report.verified,
        report.damaged,
        report.unverified,
        mb(report.bytes),
        report.seconds,
    );
}

/// Megabytes, as `b3sum`'s and `dd`'s rates are quoted.
fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}
