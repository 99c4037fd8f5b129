//! `lavenderd status --watch`: a compact view redrawn every interval, from the
//! daemon when one answers, else from the files. On a terminal the screen is
//! cleared and redrawn; otherwise each view is printed after a blank line, so the
//! output can be logged or piped.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use lavender::status::{Status, StepState};
use lavender::time::duration;

use crate::cli::commands::status::fetch;
use crate::settings::Settings;

const BAR_WIDTH: usize = 32;

pub async fn run(settings: &Settings, interval_s: f64) -> Result<ExitCode> {
    if !(interval_s.is_finite() && interval_s >= 0.05) {
        bail!("--interval {interval_s}: give at least 0.05 seconds");
    }
    let interval = Duration::from_secs_f64(interval_s);
    let tty = std::io::stdout().is_terminal();
    loop {
        let frame = match fetch(settings).await {
            Ok(status) => view(
                &status,
                &lavender::time::now_utc().format("%H:%M:%S").to_string(),
            ),
            Err(e) => format!("status unavailable: {e:#}\n"),
        };
        let mut out = std::io::stdout().lock();
        if tty {
            // Home, draw, clear what the previous (longer) view left below.
            write!(out, "\x1b[H\x1b[2J{frame}")?;
        } else {
            writeln!(out, "{frame}")?;
        }
        out.flush()?;
        drop(out);
        tokio::time::sleep(interval).await;
    }
}

/// The compact view: a few lines, the same shape whatever the state.
pub fn view(s: &Status, clock: &str) -> String {
    let t = &s.training;
    let p = &s.pipeline;
    let mut out = String::new();
    let step = s.active_step.map_or("-", |s| s.as_str());
    out.push_str(&format!(
        "lavender  {}  step {step}  chunk {}  scale {}  restarts {}   {clock}\n",
        p.state,
        p.chunk.as_deref().unwrap_or("-"),
        p.scale.as_deref().unwrap_or("-"),
        p.restarts
    ));
    match (t.step, t.total_steps) {
        (Some(done), Some(total)) if total > 0 => {
            let frac = (done as f64 / total as f64).clamp(0.0, 1.0);
            let filled = (frac * BAR_WIDTH as f64).round() as usize;
            out.push_str(&format!(
                "[{}{}] {done}/{total} ({:.1}%){}\n",
                "#".repeat(filled),
                "-".repeat(BAR_WIDTH - filled),
                frac * 100.0,
                t.stage
                    .as_ref()
                    .map(|s| format!("  {s}"))
                    .unwrap_or_default()
            ));
        }
        _ => out.push_str("no training progress yet\n"),
    }
    out.push_str(&format!(
        "loss {} (smooth {})  lr {}  {} it/s  ETA {}\n",
        num(t.loss, 4),
        num(t.loss_smooth, 4),
        t.lr.map(|v| format!("{v:.2e}"))
            .unwrap_or_else(|| "-".into()),
        num(t.steps_per_sec, 2),
        t.eta_seconds
            .map(|s| duration(Duration::from_secs(s)))
            .unwrap_or_else(|| "-".into()),
    ));
    out.push_str(&format!(
        "heartbeat {}{}  checkpoints {}{}  disk {}\n",
        t.heartbeat_age_s
            .map(|a| format!("{} ago", duration(Duration::from_secs(a))))
            .unwrap_or_else(|| "-".into()),
        if t.heartbeat_stale { " STALE" } else { "" },
        t.checkpoints,
        t.latest_checkpoint
            .as_ref()
            .map(|c| format!(" (latest {c})"))
            .unwrap_or_default(),
        s.disk
            .avail_gib
            .map(|g| format!("{g:.1} GiB free"))
            .unwrap_or_else(|| "unknown".into()),
    ));
    let steps: Vec<String> = s
        .ordered_steps()
        .into_iter()
        .map(|(name, state)| {
            let mark = match state {
                StepState::Done => "✓",
                StepState::Running => "▶",
                StepState::Failed => "✗",
                StepState::Skipped => "-",
                StepState::Pending => "·",
            };
            format!("{mark} {name}")
        })
        .collect();
    if !steps.is_empty() {
        out.push_str(&format!("steps  {}\n", steps.join("  ")));
    }
    if let Some(err) = &t.heartbeat_error {
        out.push_str(&format!("heartbeat unreadable: {err}\n"));
    }
    out
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_shows_progress_numbers_and_steps_in_pipeline_order() {
        let mut s: Status = serde_json::from_value(serde_json::json!({
            "timestamp": "2026-04-24T16:08:45Z",
            "pipeline": {"running": true, "pid": 42, "chunk": "1", "scale": "tiny", "state": "running", "restarts": 1},
            "active_step": "train",
            "steps": {"train": "running", "downloads": "done", "mine_hard": "pending"},
            "training": {"step": 250, "total_steps": 1000, "pct": 25.0, "loss": 2.5, "loss_smooth": 2.75,
                "lr": 0.0003, "steps_per_sec": 12.5, "eta_seconds": 3725, "eta_hours": 1.03,
                "heartbeat_age_s": 3, "heartbeat_stale": false, "running": true, "checkpoints": 2,
                "latest_checkpoint": "pretrain-16-08-47-0002", "stage": "pretrain", "epoch": 0.25, "heartbeat_error": null},
            "data": {"shard_count": 4, "checkpoints": 2},
            "disk": {"device": null, "used_gib": 10.0, "avail_gib": 44.25},
            "schema_version": 1
        }))
        .unwrap();
        let v = view(&s, "12:00:00");
        assert!(
            v.starts_with(
                "lavender  running  step train  chunk 1  scale tiny  restarts 1   12:00:00\n"
            ),
            "{v}"
        );
        assert!(
            v.contains(&format!(
                "[{}{}] 250/1000 (25.0%)  pretrain",
                "#".repeat(8),
                "-".repeat(24)
            )),
            "{v}"
        );
        assert!(
            v.contains("loss 2.5000 (smooth 2.7500)  lr 3.00e-4  12.50 it/s  ETA 1h 2m"),
            "{v}"
        );
        assert!(v.contains("heartbeat 3s ago  checkpoints 2 (latest pretrain-16-08-47-0002)  disk 44.2 GiB free"), "{v}");
        assert!(
            v.contains("steps  ✓ downloads  ▶ train  · mine_hard"),
            "{v}"
        );

        s.training.step = None;
        s.training.heartbeat_stale = true;
        let v = view(&s, "12:00:01");
        assert!(v.contains("no training progress yet"), "{v}");
        assert!(v.contains("STALE"), "{v}");
    }
}
