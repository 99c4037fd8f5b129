//! `lavenderd export`: a run's checkpoints as Hugging Face `checkpoint-<step>/`
//! directories, each complete or absent.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::{ExportError, Result};
use crate::hf_config::{self, ModelDims, SpecialTokens};
use crate::hf_state::{HfState, sorted};
use crate::history::LogHistory;
use crate::names::{
    CONFIG_JSON, EMA_FILE, EXPORT_DIR, EXPORT_EMA_DIR, GENERATION_CONFIG_JSON, MODEL_FILE,
    OPTIMIZER_FILE, OPTIMIZER_PT, TOKENIZER_CONFIG_JSON, TOKENIZER_JSON,
};
use crate::run_config::RunConfig;
use crate::staging;
use crate::tensors;
use lavender::atomic::StagedDir;
use lavender::checkpoint::{self, Checkpoint, EXPORT_MARKER};
use lavender::error::IoContext;
use lavender::{run, trainer_state};

/// Bumped when the export's content changes, so older exports are rebuilt.
/// 2: `optimizer.pt` beside `optimizer.safetensors`; every `log_history` entry has
/// a `learning_rate` (evaluations on their step's training entry).
const EXPORT_FORMAT: u64 = 2;

/// Which of the run's complete checkpoints to export.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Selection {
    /// The newest.
    #[default]
    Latest,
    All,
    /// By directory name (`pretrain-16-08-47-0003`) or path.
    Named(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExportOptions {
    /// The run directory (see [`locate_run`]).
    pub run: PathBuf,
    pub selection: Selection,
    /// Default `<run>/exported/`.
    pub out: Option<PathBuf>,
    /// Rebuild exports even when they are complete and current.
    pub force: bool,
    /// Export the weights' moving average (`ema.safetensors`, `training.ema`)
    /// instead of the weights, without optimizer moments (they are the weights');
    /// default directory `<run>/exported-ema/`.
    pub ema: bool,
}

impl ExportOptions {
    pub fn new(run: impl Into<PathBuf>) -> ExportOptions {
        ExportOptions {
            run: run.into(),
            selection: Selection::Latest,
            out: None,
            force: false,
            ema: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ExportStatus {
    Written,
    /// Complete and made from the same checkpoint: left as it is.
    Reused,
    /// Not exported, with the reason (another checkpoint has the same step).
    Skipped {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportedCheckpoint {
    /// The lavender checkpoint.
    pub source: PathBuf,
    pub name: String,
    pub step: u64,
    pub stage: String,
    /// The export, unless skipped.
    pub path: Option<PathBuf>,
    #[serde(flatten)]
    pub status: ExportStatus,
    /// It carries `optimizer.safetensors`.
    pub optimizer: bool,
    /// How `optimizer.safetensors` got there: a hard link to the checkpoint's own
    /// file, or a copy where no link could be made (another filesystem).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimizer_file: Option<Carried>,
}

/// How an export carries a file that is byte for byte the checkpoint's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Carried {
    /// A hard link: no byte written twice, and the export keeps the file after
    /// retention deletes the checkpoint.
    Linked,
    /// A copy: the export is on another filesystem than the checkpoint.
    Copied,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportReport {
    pub run: PathBuf,
    pub out: PathBuf,
    pub checkpoints: Vec<ExportedCheckpoint>,
    pub warnings: Vec<String>,
}

/// The run directory for `--run`: a path, a run name under `checkpoints_root`
/// (`<data_root>/checkpoints`), or (none given) the newest run there.
pub fn locate_run(checkpoints_root: &Path, run: Option<&str>) -> Result<PathBuf> {
    let root = checkpoints_root;
    match run {
        None => run::latest_run(root)?.map(|r| r.path).ok_or_else(|| {
            ExportError::missing(
                "a training run",
                root,
                "train first, or pass --run with a run directory",
            )
        }),
        Some(spec) => {
            let as_path = Path::new(spec);
            if as_path.is_dir() {
                return Ok(as_path.to_path_buf());
            }
            let named = root.join(spec);
            if named.is_dir() {
                return Ok(named);
            }
            let runs: Vec<String> = run::list_runs(root)?.iter().map(|r| r.name()).collect();
            Err(ExportError::missing(
                format!("run {spec:?}"),
                &named,
                if runs.is_empty() {
                    "there are no runs yet".to_string()
                } else {
                    format!("runs here: {}", runs.join(", "))
                },
            ))
        }
    }
}

/// What every checkpoint of the run shares.
struct RunFiles {
    dir: PathBuf,
    config: RunConfig,
    history: LogHistory,
    tokenizer: PathBuf,
    special: SpecialTokens,
}

impl RunFiles {
    /// The files of `run_dir` every export of its checkpoints reads; what they
    /// lack for SOURCE goes to `warnings`.
    fn read(run_dir: &Path, warnings: &mut Vec<String>) -> Result<RunFiles> {
        let tokenizer = run_dir.join(TOKENIZER_JSON);
        if !tokenizer.is_file() {
            return Err(ExportError::missing(
                "the run's tokenizer.json",
                &tokenizer,
                "the worker copies it into the run when training starts; copy tokens/tokenizer.json there",
            ));
        }
        let special = SpecialTokens::read(&tokenizer)?;
        if special.eos.is_none() {
            warnings.push(format!(
                "{} has no <|endoftext|> token; config.json leaves bos/eos ids unset",
                tokenizer.display()
            ));
        }
        let mut history = LogHistory::read(run_dir)?;
        // SOURCE reads `<run>/log_history.json` for checkpoints exported under the run
        // (the run has a config.yaml) and needs a learning_rate on every entry; the
        // worker logs its evaluations without one.
        if history.missing_learning_rates() > 0 && history.rewrite_for_hf_readers()?.is_none() {
            warnings.push(format!(
                "{} changed while it was read (the run is training); its evaluation entries \
                 still lack a learning_rate, which SOURCE needs: run the export again",
                history.path.display()
            ));
        }
        Ok(RunFiles {
            config: RunConfig::read(run_dir)?,
            history,
            tokenizer,
            special,
            dir: run_dir.to_path_buf(),
        })
    }
}

/// Exports the selected checkpoints of `opts.run`. Exports already complete and
/// made from the same checkpoint are reused; each new one is built in a `.tmp-`
/// directory and renamed into place. `Selection::All` covers the whole training:
/// the checkpoints of the runs `opts.run` resumed from too (`run::chain`, oldest
/// first), each exported with its own run's config, history and tokenizer.
pub fn export(opts: &ExportOptions) -> Result<ExportReport> {
    let run_dir = opts.run.clone();
    if !run_dir.is_dir() {
        return Err(ExportError::missing(
            "run directory",
            &run_dir,
            "pass --run with a run directory or a run name (`lavenderd runs` lists them)",
        ));
    }
    let mut warnings = Vec::new();
    let runs = if opts.selection == Selection::All {
        run::chain(&run_dir)
    } else {
        vec![run_dir.clone()]
    };
    let runs = runs
        .iter()
        .map(|dir| RunFiles::read(dir, &mut warnings))
        .collect::<Result<Vec<_>>>()?;
    let last = runs.len() - 1;

    let all = checkpoint::list_run_checkpoints(&run_dir)?;
    if all.is_empty() {
        return Err(ExportError::missing(
            "a complete checkpoint",
            &run_dir,
            "the run has saved none yet; export after its first checkpoint",
        ));
    }
    // Each checkpoint with the index of its run in `runs`.
    let mut selected: Vec<(Checkpoint, usize)> = Vec::new();
    for (i, files) in runs[..last].iter().enumerate() {
        let earlier = checkpoint::list_run_checkpoints(&files.dir)?;
        selected.extend(earlier.into_iter().map(|c| (c, i)));
    }
    selected.extend(
        select(&all, &opts.selection, &run_dir)?
            .into_iter()
            .map(|c| (c, last)),
    );
    // One export per step: the newest checkpoint at a step wins (the last stage's
    // save and the final save share a step and hold the same weights; a resumed
    // run's checkpoint over its parent's).
    let mut newest_at: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, (c, _)) in selected.iter().enumerate() {
        newest_at.insert(c.state.step, i);
    }

    let default_dir = if opts.ema { EXPORT_EMA_DIR } else { EXPORT_DIR };
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| run_dir.join(default_dir));
    fs::create_dir_all(&out).ctx("create the export directory", &out)?;
    staging::sweep_leftovers(&out);

    let mut report = ExportReport {
        run: run_dir,
        out: out.clone(),
        checkpoints: Vec::new(),
        warnings,
    };
    for (i, (c, run)) in selected.iter().enumerate() {
        let step = c.state.step;
        let winner = newest_at[&step];
        if winner != i {
            report.checkpoints.push(ExportedCheckpoint {
                source: c.path.clone(),
                name: c.name.clone(),
                step,
                stage: c.state.stage.clone(),
                path: None,
                status: ExportStatus::Skipped {
                    reason: format!(
                        "{} is a newer checkpoint of the same step {step}",
                        selected[winner].0.name
                    ),
                },
                optimizer: false,
                optimizer_file: None,
            });
            continue;
        }
        let done = export_one(c, &runs[*run], &out, opts, &mut report.warnings)?;
        report.checkpoints.push(done);
    }
    Ok(report)
}

fn select(all: &[Checkpoint], selection: &Selection, run_dir: &Path) -> Result<Vec<Checkpoint>> {
    Ok(match selection {
        Selection::Latest => all.last().cloned().into_iter().collect(),
        Selection::All => all.to_vec(),
        Selection::Named(names) => {
            let mut picked: Vec<Checkpoint> = Vec::new();
            for n in names {
                let wanted = Path::new(n)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| n.clone());
                let Some(c) = all.iter().find(|c| c.name == wanted) else {
                    let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
                    return Err(ExportError::missing(
                        format!("complete checkpoint {n:?}"),
                        run_dir,
                        format!("complete checkpoints of this run: {}", names.join(", ")),
                    ));
                };
                if !picked.iter().any(|p| p.path == c.path) {
                    picked.push(c.clone());
                }
            }
            // Oldest first, as listed, so "newest at a step" means the same everywhere.
            picked.sort_by_key(|p| all.iter().position(|c| c.path == p.path));
            picked
        }
    })
}

/// The part of [`EXPORT_MARKER`] that says which checkpoint (and which of its
/// weights) an export was made from.
fn provenance(c: &Checkpoint, run: &Path, with_optimizer: bool, ema: bool) -> Value {
    let mut v = json!({
        "format": EXPORT_FORMAT,
        "run": run.file_name().map(|n| n.to_string_lossy().into_owned()),
        "checkpoint": c.name,
        "step": c.state.step,
        "stage": c.state.stage,
        "saved_at": c.state.saved_at,
        "optimizer": with_optimizer,
    });
    if ema {
        v["weights"] = json!("ema");
    }
    v
}

/// An export at `target` is reused when its marker names the same checkpoint and
/// every file is there.
fn is_current(target: &Path, source: &Value) -> bool {
    let Ok(bytes) = fs::read(target.join(EXPORT_MARKER)) else {
        return false;
    };
    let Ok(marker) = serde_json::from_slice::<Value>(&bytes) else {
        return false;
    };
    if marker.get("source") != Some(source) {
        return false;
    }
    let mut files = vec![
        CONFIG_JSON,
        GENERATION_CONFIG_JSON,
        MODEL_FILE,
        TOKENIZER_JSON,
        TOKENIZER_CONFIG_JSON,
        trainer_state::FILE,
    ];
    if source.get("optimizer") == Some(&Value::Bool(true)) {
        files.push(OPTIMIZER_FILE);
        files.push(OPTIMIZER_PT);
    }
    files.iter().all(|f| target.join(f).is_file())
}

/// Hard-links `src` at `dst`; where no link can be made (another filesystem, or
/// one without hard links) copies it and says why.
fn link_or_copy(src: &Path, dst: &Path) -> Result<(Carried, Option<String>)> {
    use std::io::ErrorKind;
    match fs::hard_link(src, dst) {
        Ok(()) => Ok((Carried::Linked, None)),
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::CrossesDevices | ErrorKind::Unsupported | ErrorKind::PermissionDenied
            ) =>
        {
            fs::copy(src, dst).ctx("copy", src)?;
            let why = if e.kind() == ErrorKind::CrossesDevices {
                "the export is on another filesystem than the checkpoint".to_string()
            } else {
                format!("the filesystem refused a hard link ({e})")
            };
            Ok((Carried::Copied, Some(why)))
        }
        Err(e) => Err(lavender::Error::io("hard-link", dst, e).into()),
    }
}

/// Whether two paths name one file (a hard link).
#[cfg(unix)]
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_: &Path, _: &Path) -> bool {
    false
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(v)
        .map_err(|e| ExportError::invalid(path, format!("could not serialize: {e}")))?;
    bytes.push(b'\n');
    fs::write(path, bytes).ctx("write", path)?;
    Ok(())
}

fn export_one(
    c: &Checkpoint,
    run: &RunFiles,
    out: &Path,
    opts: &ExportOptions,
    warnings: &mut Vec<String>,
) -> Result<ExportedCheckpoint> {
    let step = c.state.step;
    let target = out.join(format!("checkpoint-{step}"));
    let model_src = c.path.join(if opts.ema { EMA_FILE } else { MODEL_FILE });
    if opts.ema && !model_src.is_file() {
        return Err(ExportError::missing(
            "the weights' moving average",
            &model_src,
            "the run trained without training.ema (e.g. {decay: 0.999}); export without --ema",
        ));
    }
    let opt_src = c.path.join(OPTIMIZER_FILE);
    // The moments are the weights', not their average's.
    let with_optimizer = !opts.ema && opt_src.is_file();
    if !opts.ema && !with_optimizer {
        warnings.push(format!(
            "{} has no {OPTIMIZER_FILE} (training.save_optimizer_state was none or last); checkpoint-{step} carries no moments",
            c.path.display()
        ));
    }
    let source = provenance(c, &run.dir, with_optimizer, opts.ema);
    let mut done = ExportedCheckpoint {
        source: c.path.clone(),
        name: c.name.clone(),
        step,
        stage: c.state.stage.clone(),
        path: Some(target.clone()),
        status: ExportStatus::Reused,
        optimizer: with_optimizer,
        optimizer_file: None,
    };
    if !opts.force && is_current(&target, &source) {
        if with_optimizer {
            done.optimizer_file = Some(if same_file(&opt_src, &target.join(OPTIMIZER_FILE)) {
                Carried::Linked
            } else {
                Carried::Copied
            });
        }
        return Ok(done);
    }

    let staging = StagedDir::begin(&target)?;
    let dir = staging.dir();
    let weights = tensors::write_hf_model(&model_src, &dir.join(MODEL_FILE))?;
    let dims = ModelDims::from_run(&run.config, &weights, &model_src)?;

    if with_optimizer {
        let moments = tensors::read_moments(&opt_src, &weights)?;
        let expected = c.state.extra.get("optimizer_step").and_then(Value::as_u64);
        if let Some(want) = expected.filter(|&w| w != moments.step) {
            return Err(ExportError::invalid(
                &opt_src,
                format!(
                    "holds the moments of optimizer step {}, but the checkpoint's trainer_state.json says optimizer_step {want}; they are not this checkpoint's",
                    moments.step
                ),
            ));
        }
        // The checkpoint's own file, linked (a copy only across filesystems): the
        // bytes the trainer saved, never written twice.
        let dst = dir.join(OPTIMIZER_FILE);
        let (carried, why) = link_or_copy(&opt_src, &dst)?;
        if let Some(why) = why {
            warnings.push(format!(
                "checkpoint-{step}: {OPTIMIZER_FILE} copied ({} bytes), not hard-linked: {why} ({} → {})",
                moments.bytes.len(),
                opt_src.display(),
                out.display()
            ));
        }
        done.optimizer_file = Some(carried);
        // The same moments as torch.optim's state_dict(), for torch.load readers.
        tensors::write_optimizer_pt(
            &moments,
            &weights,
            c.state.lr,
            &opt_src,
            &dir.join(OPTIMIZER_PT),
        )?;
    }

    write_json(
        &dir.join(CONFIG_JSON),
        &hf_config::model_config(&dims, weights.dtype, &run.special),
    )?;
    write_json(
        &dir.join(GENERATION_CONFIG_JSON),
        &hf_config::generation_config(&run.special),
    )?;
    let tok_dst = dir.join(TOKENIZER_JSON);
    fs::copy(&run.tokenizer, &tok_dst).ctx("copy the tokenizer to", &tok_dst)?;
    write_json(
        &dir.join(TOKENIZER_CONFIG_JSON),
        &hf_config::tokenizer_config(&dims, &run.special),
    )?;

    // Every step's learning rate up to this checkpoint, and the last one must be
    // the checkpoint's own: otherwise the history is from another trajectory.
    let lrs = run.history.learning_rates(step)?;
    if let Some(&last) = lrs.last()
        && last != c.state.lr
    {
        return Err(ExportError::invalid(
            &run.history.path,
            format!(
                "says step {step} ran at learning_rate {last}, but {} says lr {}; the history does not belong to this checkpoint",
                c.path.join(trainer_state::FILE).display(),
                c.state.lr
            ),
        ));
    }
    let entries = run.history.up_to(step);
    let hf = HfState {
        global_step: step,
        epoch: c.state.epoch,
        max_steps: c.state.total_steps,
        num_train_epochs: c.state.epochs.unwrap_or(0) as u64,
        train_batch_size: run.config.batch_size,
        eval_steps: run.config.eval_every,
        save_steps: run.config.checkpoint_every(&c.state.stage),
        best_metric: c.state.best_val_loss,
        log_history: &entries,
    };
    write_json(&dir.join(trainer_state::FILE), &hf.to_json())?;
    write_json(
        &dir.join(EXPORT_MARKER),
        &sorted(json!({
            "source": source,
            "lavender_trainer_state": c.state,
        })),
    )?;
    staging.commit()?;
    done.status = ExportStatus::Written;
    Ok(done)
}
