//! What `lavenderd export` and `lavenderd resolve` print: text for people, JSON
//! (`--json`) for scripts and attribution configs.

use std::fmt::Write;

use super::exporter::{ExportReport, ExportStatus};
use super::resolve::{Field, Resolved};

fn pretty<T: serde::Serialize>(v: &T) -> String {
    // Plain data (paths, numbers, strings): serialization cannot fail.
    let mut s = serde_json::to_string_pretty(v).expect("report types serialize");
    s.push('\n');
    s
}

pub fn export_json(r: &ExportReport) -> String {
    pretty(r)
}

pub fn export_text(r: &ExportReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "run {}", r.run.display());
    for c in &r.checkpoints {
        let what = match &c.status {
            ExportStatus::Written => "written",
            ExportStatus::Reused => "up to date",
            ExportStatus::Skipped { .. } => "skipped",
        };
        let dest = match (&c.path, &c.status) {
            (_, ExportStatus::Skipped { reason }) => format!(": {reason}"),
            (Some(p), _) => format!(" -> {}", p.display()),
            (None, _) => String::new(),
        };
        let moments = if c.optimizer {
            ""
        } else {
            " (no optimizer state)"
        };
        let _ = writeln!(
            s,
            "  {:<10} {} (step {}, {}){dest}{moments}",
            what, c.name, c.step, c.stage
        );
    }
    let written = r
        .checkpoints
        .iter()
        .filter(|c| c.status == ExportStatus::Written)
        .count();
    let reused = r
        .checkpoints
        .iter()
        .filter(|c| c.status == ExportStatus::Reused)
        .count();
    let _ = writeln!(
        s,
        "{written} exported, {reused} already up to date, in {}",
        r.out.display()
    );
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

pub fn resolve_json(r: &Resolved) -> String {
    pretty(r)
}

fn source(f: Field) -> &'static str {
    match f {
        Field::Explicit => "given",
        Field::Run => "from the run",
        Field::Unset => "unset",
    }
}

pub fn resolve_text(r: &Resolved) -> String {
    let mut s = String::new();
    match &r.run {
        Some(run) => {
            let _ = writeln!(s, "run          {}", run.display());
        }
        None => {
            let _ = writeln!(
                s,
                "run          none inferred (not a lavender export): nothing filled"
            );
        }
    }
    let _ = writeln!(s, "checkpoints  {}", r.checkpoints.len());
    for c in &r.checkpoints {
        let step = c.step.map_or("step ?".to_string(), |n| format!("step {n}"));
        let _ = writeln!(s, "  {step:<10} {}", c.path.display());
    }
    let model = r
        .model_path
        .as_ref()
        .map_or("-".to_string(), |p| p.display().to_string());
    let _ = writeln!(
        s,
        "model_path   {model}  ({})",
        source(r.sources.model_path)
    );
    let momentum = r.momentum.map_or("-".to_string(), |m| m.to_string());
    let _ = writeln!(
        s,
        "momentum     {momentum}  ({})",
        source(r.sources.momentum)
    );
    let lrs = match &r.lr_list {
        Some(l) if l.is_empty() => "0 steps".to_string(),
        Some(l) => format!("{} steps, {} … {}", l.len(), l[0], l[l.len() - 1]),
        None => "-".to_string(),
    };
    let _ = writeln!(s, "lr_list      {lrs}  ({})", source(r.sources.lr_list));
    if let Some(segs) = &r.segments {
        let factor = segs.first().map_or(1.0, |g| g.factor);
        if r.terminal_velocity {
            let _ = writeln!(
                s,
                "lr×steps per segment, terminal-velocity factor 1/(1−β) = {factor:.6} applied:"
            );
        } else {
            let _ = writeln!(s, "lr×steps per segment (no momentum factor):");
        }
        for g in segs {
            let _ = writeln!(
                s,
                "  steps {:>6} → {:<6} {:>6} steps  Σlr {:<12.6e} lr×steps {:.6e}",
                g.from_step, g.to_step, g.steps, g.lr_sum, g.lr_x_steps
            );
        }
    }
    s
}
