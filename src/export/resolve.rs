//! `lavenderd resolve`: fills what an attribution config leaves unset from the run
//! that produced its checkpoints. Derivation is only ever a fallback: an explicit
//! value always wins, and checkpoints lavender did not export infer nothing.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::exporter::{EXPORT_DIR, EXPORT_MARKER};
use super::history::LogHistory;
use super::run_config::{CONFIG_FILE, RunConfig};
use super::segments::{self, Segment};
use super::step::{checkpoint_step, dir_name};
use super::{ExportError, Result};
use crate::error::IoContext;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResolveOptions {
    /// The checkpoints to attribute, in training order.
    pub checkpoints: Vec<PathBuf>,
    pub model_path: Option<PathBuf>,
    /// SGD momentum / AdamW β1. `Some(0.0)` is a value, not "unset".
    pub momentum: Option<f64>,
    /// The learning rate of every step, step 1 first.
    pub lr_list: Option<Vec<f64>>,
    /// Multiply each segment's lr×steps by 1/(1−momentum).
    pub terminal_velocity: bool,
}

/// Where a resolved value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Field {
    /// Given by the caller.
    Explicit,
    /// Read from the run that produced the checkpoints.
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
    pub lr_list: Field,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    /// As given, in order.
    pub checkpoints: Vec<ResolvedCheckpoint>,
    /// The run inferred from the first checkpoint.
    pub run: Option<PathBuf>,
    pub model_path: Option<PathBuf>,
    pub momentum: Option<f64>,
    pub lr_list: Option<Vec<f64>>,
    pub sources: Sources,
    pub terminal_velocity: bool,
    /// lr×steps per segment, when every step and learning rate is known.
    pub segments: Option<Vec<Segment>>,
}

/// Fills `model_path`, `momentum` and `lr_list` where `opts` leaves them unset, from
/// the run inferred from `opts.checkpoints[0]`, and computes the segments.
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
    if let Some(bad) = opts
        .lr_list
        .iter()
        .flatten()
        .find(|lr| !lr.is_finite() || **lr < 0.0)
    {
        return Err(ExportError::bad_option(
            "--lr-list",
            format!("{bad} is not a learning rate"),
        ));
    }
    for c in &opts.checkpoints {
        if !c.exists() {
            return Err(ExportError::missing(
                "checkpoint",
                c,
                "check the path; `lavenderd export` prints where it wrote each checkpoint",
            ));
        }
        refuse_unexported(c)?;
    }
    let checkpoints: Vec<ResolvedCheckpoint> = opts
        .checkpoints
        .iter()
        .map(|p| ResolvedCheckpoint {
            path: p.clone(),
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
    let steps: Option<Vec<u64>> = checkpoints.iter().map(|c| c.step).collect();

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
    let (momentum, momentum_from) = match (opts.momentum, &run) {
        (Some(m), _) => (Some(m), Field::Explicit),
        (None, Some(run)) => (Some(RunConfig::read(run)?.momentum), Field::Run),
        (None, None) => (None, Field::Unset),
    };
    let (lr_list, lr_from) = match (&opts.lr_list, &run, &steps) {
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

    let segments = match (&lr_list, &steps) {
        (Some(lrs), Some(steps)) => {
            let factor = if opts.terminal_velocity {
                let m = momentum.ok_or_else(|| {
                    ExportError::bad_option(
                        "--terminal-velocity",
                        "the momentum is unknown (the checkpoints are not a lavender export); pass --momentum",
                    )
                })?;
                segments::terminal_velocity_factor(m)
            } else {
                1.0
            };
            Some(segments::lr_x_steps(steps, lrs, factor)?)
        }
        _ if opts.terminal_velocity => {
            return Err(ExportError::bad_option(
                "--terminal-velocity",
                "needs every checkpoint's step and every step's learning rate; pass --lr-list, or checkpoints named checkpoint-<N> from a lavender export",
            ));
        }
        _ => None,
    };

    Ok(Resolved {
        checkpoints,
        run,
        model_path,
        momentum,
        lr_list,
        sources: Sources {
            model_path: model_from,
            momentum: momentum_from,
            lr_list: lr_from,
        },
        terminal_velocity: opts.terminal_velocity,
        segments,
    })
}

/// `--lr-list`: learning rates separated by commas or whitespace, or `@FILE` holding
/// such a list or a JSON array; step 1 first.
pub fn parse_lr_list(spec: &str) -> Result<Vec<f64>> {
    let (text, origin) = match spec.strip_prefix('@') {
        Some(file) => {
            let path = Path::new(file);
            let text = std::fs::read_to_string(path).ctx("read the --lr-list file", path)?;
            (text, file.to_string())
        }
        None => (spec.to_string(), "--lr-list".to_string()),
    };
    let trimmed = text.trim();
    if trimmed.starts_with('[') {
        return serde_json::from_str(trimmed).map_err(|e| {
            ExportError::bad_option(
                "--lr-list",
                format!("{origin} is not a JSON array of numbers: {e}"),
            )
        });
    }
    trimmed
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<f64>().map_err(|_| {
                ExportError::bad_option("--lr-list", format!("{t:?} in {origin} is not a number"))
            })
        })
        .collect()
}

/// A lavender checkpoint as the worker saved it cannot be loaded by attribution
/// tools: say so up front rather than fail later inside `from_pretrained`.
fn refuse_unexported(path: &Path) -> Result<()> {
    // A Hugging Face checkpoint is complete too, but it is already in the format the
    // tools read: only lavender's own trainer_state.json means "export first".
    if !crate::trainer_state::is_lavender_own(path) || path.join(EXPORT_MARKER).is_file() {
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

    #[test]
    fn lr_lists_from_the_command_line_or_a_file() {
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
        assert!(err.contains("\"x\" in --lr-list is not a number"), "{err}");
        let err = parse_lr_list("@/nonexistent/lrs").unwrap_err().to_string();
        assert!(err.contains("/nonexistent/lrs"), "{err}");
    }
}
