//! What `lavenderd export` and `lavenderd resolve` print: text for people, JSON
//! (`--json`) for scripts and attribution configs.

use std::fmt::Write;

use crate::exporter::{ExportReport, ExportStatus};
use crate::resolve::{Field, Resolved};
use crate::yaml::{yaml_float, yaml_list, yaml_str};

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

/// The `approx_unrolling_cfg:` fragment of a bergson `approxunrolling` step, with
/// where each value came from as comments. Unset values are left out, so bergson
/// applies its own defaults.
pub fn resolve_yaml(r: &Resolved) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# bergson approx_unrolling_cfg (SOURCE), from `lavenderd resolve`"
    );
    match (&r.run, &r.optimizer) {
        (Some(run), opt) => {
            let _ = writeln!(
                s,
                "# run: {} (optimizer: {})",
                run.display(),
                opt.as_deref().unwrap_or("?")
            );
        }
        (None, _) => {
            let _ = writeln!(
                s,
                "# run: none inferred (not a lavender export): only given values are filled"
            );
        }
    }
    let _ = writeln!(s, "approx_unrolling_cfg:");
    let _ = writeln!(s, "  checkpoints:");
    for c in &r.checkpoints {
        let step = c.step.map_or("step ?".to_string(), |n| format!("step {n}"));
        let _ = writeln!(
            s,
            "  - {}  # {step}",
            yaml_str(&c.path.display().to_string())
        );
    }
    let _ = writeln!(s, "  segments: {}", r.segments);
    if let (Some(lrs), Some(sizes)) = (&r.lr_list, &r.step_size_list) {
        let _ = writeln!(
            s,
            "  # per segment: average learning rate and optimizer steps ({})",
            source(r.sources.lr_list)
        );
        let _ = writeln!(s, "  lr_list: {}", yaml_list(lrs, |x| yaml_float(*x)));
        let _ = writeln!(s, "  step_size_list: {}", yaml_list(sizes, u64::to_string));
    }
    if let Some(m) = r.momentum {
        let why = match (r.sources.momentum, r.optimizer.as_deref()) {
            (Field::Run, Some("adamw")) => {
                "from the run: AdamW, whose β1 is not a heavy-ball momentum".to_string()
            }
            (f, _) => source(f).to_string(),
        };
        let _ = writeln!(
            s,
            "  # heavy-ball SGD β: SOURCE scales lr×steps by 1/(1−β) ({why})"
        );
        let _ = writeln!(s, "  momentum: {}", yaml_float(m));
    }
    if let Some(a) = r.use_adam_preconditioner {
        let what = if a {
            "; reads each checkpoint's optimizer.pt"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  use_adam_preconditioner: {a}  # {}{what}",
            source(r.sources.use_adam_preconditioner)
        );
    }
    if let Some(p) = &r.model_path {
        let _ = writeln!(
            s,
            "  model_path: {}  # {}",
            yaml_str(&p.display().to_string()),
            source(r.sources.model_path)
        );
    }
    if let Some(segs) = &r.segment_details {
        let _ = writeln!(s, "# lr×steps per segment, as SOURCE computes it:");
        for g in segs {
            let _ = writeln!(
                s,
                "#   steps {:>6} → {:<6} {:>6} steps × lr {:.6e} × {:.4} = {:.6e}",
                g.from_step, g.to_step, g.steps, g.lr, g.factor, g.lr_x_steps
            );
        }
    }
    if let Some(l) = &r.step_lrs {
        let _ = writeln!(
            s,
            "# step_lrs (lavender's per-step record, {}): {} steps{}",
            source(r.sources.step_lrs),
            l.len(),
            match (l.first(), l.last()) {
                (Some(a), Some(b)) => format!(", {a} … {b}"),
                _ => String::new(),
            }
        );
    }
    s
}
