//! `lavenderd resolve`: a bergson `approx_unrolling_cfg` (SOURCE) for checkpoints a
//! lavender run exported, with what the config leaves unset filled from that run.
//! Derivation is only ever a fallback: an explicit value always wins (an explicit
//! 0.0 too), and checkpoints lavender did not export infer nothing.
//!
//! Names follow bergson's: `lr_list` is one average learning rate per segment and
//! `step_size_list` its number of optimizer steps (SOURCE multiplies them, then by
//! 1/(1−momentum)); `momentum` is heavy-ball SGD's β, 0.0 for AdamW. lavender's own
//! record of every step's rate is `step_lrs`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{ExportError, Result};
use crate::history::LogHistory;
use crate::names::{CONFIG_FILE, EXPORT_DIR};
use crate::run_config::RunConfig;
use crate::segments::{self, Segment};
use crate::step::{checkpoint_step, dir_name};
use lavender::checkpoint::EXPORT_MARKER;
use lavender::error::IoContext;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResolveOptions {
    /// The checkpoints to attribute, in training order.
    pub checkpoints: Vec<PathBuf>,
    pub model_path: Option<PathBuf>,
    /// SOURCE's momentum: heavy-ball SGD β. `Some(0.0)` is a value, not "unset".
    pub momentum: Option<f64>,
    /// The learning rate of every step, step 1 first (lavender's per-step record).
    pub step_lrs: Option<Vec<f64>>,
    /// How many segments SOURCE splits the trajectory into; must divide the number
    /// of checkpoints. Default: one per checkpoint.
    pub segments: Option<usize>,
    /// SOURCE's per-segment average learning rates; given with `step_size_list`.
    pub lr_list: Option<Vec<f64>>,
    /// SOURCE's per-segment optimizer step counts; given with `lr_list`.
    pub step_size_list: Option<Vec<u64>>,
    pub use_adam_preconditioner: Option<bool>,
}

/// Where a resolved value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Field {
    /// Given by the caller.
    Explicit,
    /// Read (or computed) from the run that produced the checkpoints.
    Run,
    /// Neither: left for the attribution tool's own default.
    Unset,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolvedCheckpoint {
    pub path: PathBuf,
    /// `None` when neither the name nor the files say.
    pub step: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sources {
    pub model_path: Field,
    pub momentum: Field,
    pub step_lrs: Field,
    /// Of `lr_list` and `step_size_list` together.
    pub lr_list: Field,
    pub use_adam_preconditioner: Field,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    /// As given, in order.
    pub checkpoints: Vec<ResolvedCheckpoint>,
    /// The run inferred from the first checkpoint.
    pub run: Option<PathBuf>,
    /// The run's optimizer, as bergson names it (`adamw`).
    pub optimizer: Option<String>,
    pub model_path: Option<PathBuf>,
    pub segments: usize,
    pub lr_list: Option<Vec<f64>>,
    pub step_size_list: Option<Vec<u64>>,
    pub momentum: Option<f64>,
    pub use_adam_preconditioner: Option<bool>,
    /// Every step's learning rate up to the last checkpoint (lavender's record).
    pub step_lrs: Option<Vec<f64>>,
    pub sources: Sources,
    /// Per segment, lr×steps as SOURCE computes it from this config.
    pub segment_details: Option<Vec<Segment>>,
}

/// Fills `model_path`, `momentum`, `use_adam_preconditioner`, the per-step rates
/// and SOURCE's per-segment `lr_list`/`step_size_list` where `opts` leaves them
/// unset, from the run inferred from `opts.checkpoints[0]`.
pub fn resolve(opts: &ResolveOptions) -> Result<Resolved> {
    let Some(first) = opts.checkpoints.first() else {
        return Err(ExportError::bad_option(
            "CHECKPOINT",
            "name at least one checkpoint directory",
        ));
    };
    if let Some(m) = opts.momentum
        && !(0.0..1.0).contains(&m)
    {
        return Err(ExportError::bad_option(
            "--momentum",
            format!("{m} is not in [0, 1)"),
        ));
    }
    for (option, list) in [("--step-lrs", &opts.step_lrs), ("--lr-list", &opts.lr_list)] {
        if let Some(bad) = list
            .iter()
            .flatten()
            .find(|lr| !lr.is_finite() || **lr < 0.0)
        {
            return Err(ExportError::bad_option(
                option,
                format!("{bad} is not a learning rate"),
            ));
        }
    }
    for c in &opts.checkpoints {
        if !c.exists() {
            return Err(ExportError::missing(
                "checkpoint",
                c,
                "check the path; `lavenderd export` prints where it wrote each checkpoint",
            ));
        }
        refuse_unusable(c)?;
    }
    let n = opts.checkpoints.len();
    let segments = opts.segments.unwrap_or(n);
    if segments == 0 || !n.is_multiple_of(segments) {
        return Err(ExportError::bad_option(
            "--segments",
            format!(
                "{segments} does not divide the {n} checkpoints; SOURCE gives each segment the same number of checkpoints"
            ),
        ));
    }
    let checkpoints: Vec<ResolvedCheckpoint> = opts
        .checkpoints
        .iter()
        .map(|p| ResolvedCheckpoint {
            path: std::path::absolute(p).unwrap_or_else(|_| p.clone()),
            step: checkpoint_step(p).ok(),
        })
        .collect();
    let run = producing_run(first);
    if let Some(run) = &run {
        for c in &opts.checkpoints[1..] {
            if let Some(other) = producing_run(c)
                && !same_dir(&other, run)
            {
                return Err(ExportError::bad_option(
                    "CHECKPOINT",
                    format!(
                        "{} is from run {}, but {} is from run {}; attribute one run's trajectory at a time",
                        c.display(),
                        other.display(),
                        first.display(),
                        run.display()
                    ),
                ));
            }
        }
    }
    let run_config = run.as_deref().map(RunConfig::read).transpose()?;
    let steps: Option<Vec<u64>> = checkpoints.iter().map(|c| c.step).collect();
    if let Some(steps) = &steps {
        segments::check_order(steps)?;
    }

    let (model_path, model_from) = match (&opts.model_path, &run) {
        (Some(p), _) => (Some(p.clone()), Field::Explicit),
        (None, Some(_)) => {
            // The final model of the trajectory: the checkpoint with the highest step.
            let newest = checkpoints
                .iter()
                .max_by_key(|c| c.step)
                .map(|c| c.path.clone());
            (newest, Field::Run)
        }
        (None, None) => (None, Field::Unset),
    };
    let (momentum, momentum_from) = match (opts.momentum, &run_config) {
        (Some(m), _) => (Some(m), Field::Explicit),
        (None, Some(rc)) => (Some(rc.source_momentum()), Field::Run),
        (None, None) => (None, Field::Unset),
    };
    let (adam, adam_from) = match (opts.use_adam_preconditioner, &run_config) {
        (Some(a), _) => (Some(a), Field::Explicit),
        (None, Some(rc)) => (Some(rc.adam_preconditioned()), Field::Run),
        (None, None) => (None, Field::Unset),
    };
    let (step_lrs, step_lrs_from) = match (&opts.step_lrs, &run, &steps) {
        (Some(l), _, _) => (Some(l.clone()), Field::Explicit),
        (None, Some(run), Some(steps)) => {
            let last = steps.iter().copied().max().unwrap_or(0);
            (
                Some(LogHistory::read(run)?.learning_rates(last)?),
                Field::Run,
            )
        }
        _ => (None, Field::Unset),
    };

    let (lists, lists_from) = match (&opts.lr_list, &opts.step_size_list) {
        (Some(lrs), Some(sizes)) => {
            for (option, len) in [("--lr-list", lrs.len()), ("--step-size-list", sizes.len())] {
                if len != segments {
                    return Err(ExportError::bad_option(
                        option,
                        format!(
                            "has {len} values, one per segment is needed ({segments} segments)"
                        ),
                    ));
                }
            }
            (Some((lrs.clone(), sizes.clone())), Field::Explicit)
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(ExportError::bad_option(
                "--lr-list",
                "SOURCE uses lr_list only together with step_size_list: give both, or neither to compute them from the per-step rates",
            ));
        }
        (None, None) => match (&step_lrs, &steps) {
            (Some(lrs), Some(steps)) => {
                let source = if step_lrs_from == Field::Explicit {
                    Field::Explicit
                } else {
                    Field::Run
                };
                (Some(segments::per_segment(steps, segments, lrs)?), source)
            }
            _ => (None, Field::Unset),
        },
    };
    let factor = segments::terminal_velocity_factor(momentum.unwrap_or(0.0));
    let segment_details = match (&lists, &steps) {
        (Some((lrs, sizes)), Some(steps)) => {
            Some(segments::details(steps, segments, lrs, sizes, factor))
        }
        _ => None,
    };
    let (lr_list, step_size_list) = match lists {
        Some((l, s)) => (Some(l), Some(s)),
        None => (None, None),
    };

    Ok(Resolved {
        checkpoints,
        optimizer: run_config.as_ref().map(|rc| rc.optimizer().to_string()),
        run,
        model_path,
        segments,
        lr_list,
        step_size_list,
        momentum,
        use_adam_preconditioner: adam,
        step_lrs,
        sources: Sources {
            model_path: model_from,
            momentum: momentum_from,
            step_lrs: step_lrs_from,
            lr_list: lists_from,
            use_adam_preconditioner: adam_from,
        },
        segment_details,
    })
}

/// A list option (`--step-lrs`, `--lr-list`, `--step-size-list`): numbers separated
/// by commas or whitespace, or `@FILE` holding such a list or a JSON array.
pub fn parse_list(option: &'static str, spec: &str) -> Result<Vec<f64>> {
    let (text, origin) = match spec.strip_prefix('@') {
        Some(file) => {
            let path = Path::new(file);
            let text = std::fs::read_to_string(path).ctx("read the list file", path)?;
            (text, file.to_string())
        }
        None => (spec.to_string(), option.to_string()),
    };
    let trimmed = text.trim();
    if trimmed.starts_with('[') {
        return serde_json::from_str(trimmed).map_err(|e| {
            ExportError::bad_option(
                option,
                format!("{origin} is not a JSON array of numbers: {e}"),
            )
        });
    }
    trimmed
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<f64>().map_err(|_| {
                ExportError::bad_option(option, format!("{t:?} in {origin} is not a number"))
            })
        })
        .collect()
}

/// A checkpoint whose save was cut short, and a lavender checkpoint as the worker
/// saved it, cannot be loaded by attribution tools: say so up front rather than fail
/// later inside `from_pretrained`.
fn refuse_unusable(path: &Path) -> Result<()> {
    let marker = path.join(lavender::trainer_state::FILE);
    if marker.is_file() && !lavender::checkpoint::is_complete(path) {
        return Err(ExportError::invalid(
            marker,
            "is empty or does not parse, so this checkpoint is incomplete (its save was interrupted); pass a complete checkpoint",
        ));
    }
    // A Hugging Face checkpoint is complete too, but it is already in the format the
    // tools read: only lavender's own trainer_state.json means "export first".
    if !lavender::trainer_state::is_lavender_own(path) || path.join(EXPORT_MARKER).is_file() {
        return Ok(());
    }
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let run = abs.parent().map(Path::to_path_buf).unwrap_or_default();
    Err(ExportError::NotExported {
        name: dir_name(path).unwrap_or_default(),
        path: path.to_path_buf(),
        run,
    })
}

/// The run that exported `checkpoint`, probing only the layouts lavender emits:
/// `<run>/exported/checkpoint-N` and `<run>/checkpoint-N`, each marked by
/// [`EXPORT_MARKER`], with the run's `config.yaml`. An unrelated `config.yaml`
/// further up is never taken for the producing run.
fn producing_run(checkpoint: &Path) -> Option<PathBuf> {
    let name = dir_name(checkpoint)?;
    if !name.starts_with("checkpoint-") || !checkpoint.join(EXPORT_MARKER).is_file() {
        return None;
    }
    let abs = std::path::absolute(checkpoint).ok()?;
    let parent = abs.parent()?;
    let is_run = |dir: &Path| dir.join(CONFIG_FILE).is_file();
    if parent.file_name().is_some_and(|n| n == EXPORT_DIR)
        && let Some(run) = parent.parent()
        && is_run(run)
    {
        return Some(run.to_path_buf());
    }
    is_run(parent).then(|| parent.to_path_buf())
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_lr_list(spec: &str) -> Result<Vec<f64>> {
        parse_list("--step-lrs", spec)
    }

    #[test]
    fn lists_from_the_command_line_or_a_file() {
        assert_eq!(parse_lr_list("0.1,0.2, 3e-4").unwrap(), [0.1, 0.2, 3e-4]);
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("lrs.json");
        std::fs::write(&json, "[0.5, 0.25]").unwrap();
        assert_eq!(
            parse_lr_list(&format!("@{}", json.display())).unwrap(),
            [0.5, 0.25]
        );
        let lines = dir.path().join("lrs.txt");
        std::fs::write(&lines, "0.5\n0.25\n").unwrap();
        assert_eq!(
            parse_lr_list(&format!("@{}", lines.display())).unwrap(),
            [0.5, 0.25]
        );
        let err = parse_lr_list("0.1,x").unwrap_err().to_string();
        assert!(err.contains("\"x\" in --step-lrs is not a number"), "{err}");
        let err = parse_lr_list("@/nonexistent/lrs").unwrap_err().to_string();
        assert!(err.contains("/nonexistent/lrs"), "{err}");
    }
}
