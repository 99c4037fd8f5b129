//! `lavender-worker train`: pretrain → sft → dpo with checkpoints that resume
//! exactly, a heartbeat, milestone events, and a clean stop on SIGTERM/SIGINT.

pub mod checkpointing;
pub mod data;
pub mod device;
pub mod divergence;
pub mod ema;
pub mod eta;
pub mod history;
pub mod objective;
pub mod precision;
pub mod rng;
pub mod runtime;
pub mod settings;
pub mod staging;
pub mod status;
pub mod trainer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use lavender::checkpoint::{self, Checkpoint};
use lavender::events::{self, Event, kind as kinds};
use lavender::failure::FailureKind;
use lavender::heartbeat::WorkerState;
use lavender::{run, trainlog};

use crate::cli::StepArgs;
use crate::failure::{self, KindExt};
use crate::model::Gpt;
use crate::optim::AdamW;
use crate::tokens::Tokens;
use precision::Precision;
use settings::Settings;
use status::Reporter;
use trainer::{Outcome, Parts, Trainer};

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    #[command(flatten)]
    pub step: StepArgs,
    /// Resume from a checkpoint directory, a run directory (its newest checkpoint), or `latest`.
    #[arg(long, value_name = "PATH|latest")]
    pub resume: Option<String>,
    /// Compute device: auto|cpu|cuda|cuda:N|mps (overrides the config's `device`).
    #[arg(long)]
    pub device: Option<String>,
    /// Stop once this global step is done, exactly as on SIGTERM (save, exit 0);
    /// `lavenderd drill` sets it through the environment, as for any worker.
    #[arg(long, value_name = "STEP", hide = true, env = "LAVENDER_STOP_AT_STEP")]
    pub stop_at_step: Option<u64>,
    /// Test hook: the N-th save of this process writes its files and holds its commit
    /// until a file `.tmp-release-held-save` appears in the run directory, so a save
    /// stays in flight while training goes on. Until then the process does not exit
    /// on its own (its next save or its end waits for that one): the test releases
    /// the save or kills the process.
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "N", hide = true)]
    pub hold_save: Option<u32>,
    /// Test hook: once this global step is done, the training thread loops for ever
    /// in `hung_in_test_hook` (a hang in a known place, for the daemon's evidence).
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "STEP", hide = true)]
    pub hang_at_step: Option<u64>,
    /// Test hook: a resume bug. A resume forgets one piece of its state: `cursor`,
    /// the data position (the epoch's data starts over); `rng`, the random state
    /// (dropout draws as if the run began at the checkpoint).
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "PART", hide = true, value_parser = ["cursor", "rng"])]
    pub forget_on_resume: Option<String>,
}

/// Runs training on a dedicated thread; SIGTERM/SIGINT only set a flag that the
/// loop reads at step boundaries, so a second signal cannot interrupt a save. An
/// error or a panic ends with the `failed` heartbeat and event saying why
/// (`crate::failure`); `main` exits with the kind's code.
pub fn run(args: TrainArgs) -> Result<()> {
    runtime::tune();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("could not install the SIGTERM/SIGINT handler")?;
    }
    let handle = std::thread::Builder::new()
        .name("trainer".into())
        .spawn(move || {
            let mut run_dir = None;
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                train(args, stop, &mut run_dir)
            }))
            .unwrap_or_else(|panic| {
                let f = failure::failure_of_panic(&*panic);
                Err(failure::tag(anyhow::Error::msg(f.message), f.kind))
            });
            if let (Err(e), Some(dir)) = (&result, run_dir) {
                // Best effort: the error itself is what the user needs to see.
                let _ = Reporter::continuing(dir).failed(&failure::failure_of(e));
            }
            result
        })
        .context("could not start the training thread")?;
    handle
        .join()
        .map_err(|_| anyhow!("the training thread ended abnormally"))?
}

fn train(args: TrainArgs, stop: Arc<AtomicBool>, run_dir_out: &mut Option<PathBuf>) -> Result<()> {
    let started = Instant::now();
    // A run directory given (lavenderd gives one) hears of a failure from the start.
    *run_dir_out = args.step.run_dir.clone();
    let s = Settings::load(&args.step).kind(FailureKind::Config)?;
    tch::set_num_threads(s.threads as i32);
    let device = device::from_flag(args.device.as_deref(), s.config.device, &s.origins)
        .kind(FailureKind::Config)?;
    let precision = Precision::resolve(s.config.training.precision, device);
    let tf32 = s.config.training.tf32 && matches!(device, tch::Device::Cuda(_));
    if tf32 {
        crate::native::set_tf32(true)?;
    }
    let tokens_dir = s.data_root.join(lavender::data_root::TOKENS);
    let tokens = Tokens::open(&tokens_dir).kind(FailureKind::Data)?;
    let checkpoints_root = s.checkpoints_root();
    // `--resume` naming nothing usable is an argument the worker rejects.
    let resume = match &args.resume {
        Some(spec) => {
            Some(checkpoint::resolve_resume(spec, &checkpoints_root).kind(FailureKind::Config)?)
        }
        None => None,
    };
    // A checkpoint of another chunk seeds a new run: steps and history start again.
    let same_chunk = resume
        .as_ref()
        .filter(|ck| checkpointing::chunk_of(ck).is_none_or(|c| c == s.chunk as u64));
    let run_dir = choose_run_dir(args.step.run_dir.as_deref(), same_chunk, &checkpoints_root)?;
    *run_dir_out = Some(run_dir.clone());
    trainlog::log_run_dir(&run_dir)?;
    lavender::atomic::write_file(
        &run_dir.join("config.yaml"),
        s.run_config_yaml(&run_dir).as_bytes(),
    )?;
    let tokenizer = tokens.tokenizer_path();
    let tok_bytes = std::fs::read(&tokenizer)
        .with_context(|| {
            format!(
                "could not read the tokenizer {}; run `lavender-worker precompute` first",
                tokenizer.display()
            )
        })
        .kind(FailureKind::Data)?;
    if let Some(ck) = &resume {
        checkpointing::check_tokenizer(ck, &tok_bytes).kind(FailureKind::IncompatibleCheckpoint)?;
    }
    if let Some(p) = &s.pretrained {
        let theirs = std::fs::read(&p.tokenizer)
            .with_context(|| format!("could not read {}", p.tokenizer.display()))
            .kind(FailureKind::Data)?;
        if theirs != tok_bytes {
            return Err(anyhow!(
                "the tokens under {} were made with another tokenizer than model.init_from's ({}); rerun `lavender-worker precompute`",
                tokens_dir.display(),
                p.tokenizer.display()
            ))
            .kind(FailureKind::IncompatibleCheckpoint);
        }
    }
    lavender::atomic::write_file(&run_dir.join(crate::tokens::TOKENIZER_FILE), &tok_bytes)?;

    let total_steps = s.total_steps();
    let mut reporter = Reporter::new(run_dir.clone(), total_steps);
    reporter.set_state(WorkerState::Starting)?;
    let shards = tokens
        .select_shards(s.chunk, s.config.preset().shards)
        .kind(FailureKind::Data)?;
    let shortfall = s
        .config
        .shard_shortfall(tokens.index.shard_names().len() as u64);

    let size = s.config.model_size();
    tch::manual_seed(s.seed as i64);
    let mut model = Gpt::new(s.model(tokens.index.vocab_size)?, device)?;
    // A resume loads its checkpoint's weights instead.
    if let (Some(p), None) = (&s.pretrained, &resume) {
        p.load_into(&mut model)
            .kind(FailureKind::IncompatibleCheckpoint)?;
    }
    model.params.init_grads()?;
    let mut opt = AdamW::new(s.adamw, &model.params);
    let init_from = s.pretrained.as_ref().map(|p| p.dir.display().to_string());
    reporter.event(
        Event::new(
            kinds::RUN_STARTED,
            format!(
                "training started on {} in {} ({} threads), chunk {}, scale {}: {} layers x {} wide, {total_steps} steps{}",
                device::name(device),
                precision.as_str(),
                s.threads,
                s.chunk,
                s.config.scale,
                size.n_layer,
                size.n_embd,
                init_from
                    .as_ref()
                    .filter(|_| resume.is_none())
                    .map_or(String::new(), |d| format!(", from {d}"))
            ),
        )
        .with("init_from", &init_from)
        .with("device", device::name(device))
        .with("precision", precision.as_str())
        .with("tf32", tf32)
        .with("ema", s.config.training.ema)
        .with("threads", s.threads)
        .with("chunk", s.chunk)
        .with("scale", s.config.scale.as_str())
        .with("total_steps", total_steps)
        .with("parameters", model.params.numel())
        .with("model", size)
        .with("shards", &shards)
        .with("run_dir", &run_dir)
        // It prunes its own checkpoints after every save: the daemon leaves them be.
        .with(events::RETENTION_FIELD, events::RETENTION_BY_WORKER),
    )?;
    if let Some(short) = shortfall {
        reporter.event(
            Event::new(kinds::SHARDS_SHORT, short.to_string())
                .with("scale", short.scale.as_str())
                .with("shards_wanted", short.wanted)
                .with("shards_available", short.available)
                .with("shards", &shards),
        )?;
    }

    if resume.is_some() {
        reporter.phase(WorkerState::Loading)?;
    }
    let resumed = match &resume {
        Some(ck) => Some(
            checkpointing::load(ck, &s, &mut model, &mut opt)
                .kind(FailureKind::IncompatibleCheckpoint)?,
        ),
        None => None,
    };
    let keep_until = resumed
        .as_ref()
        .filter(|r| !r.new_chunk)
        .map(|r| r.progress.step);
    let previous_run = resume.as_ref().and_then(|c| c.path.parent());
    let history = history::History::open(&run_dir, keep_until, previous_run)?;

    let mut t = Trainer::new(Parts {
        s,
        device,
        precision,
        run_dir,
        tokens,
        shards,
        model,
        opt,
        history,
        reporter,
        stop,
        stop_at_step: args.stop_at_step,
        #[cfg(feature = "test-hooks")]
        hold_save: args.hold_save,
        #[cfg(feature = "test-hooks")]
        hang_at_step: args.hang_at_step,
        #[cfg(feature = "test-hooks")]
        forget_on_resume: args.forget_on_resume.clone(),
        started,
    });
    if let (Some(ck), Some(r)) = (&resume, resumed) {
        t.resume_from(ck, r)?;
    }
    t.plan_skips()?;
    if resume.is_some() {
        t.end_phase()?;
    }

    let outcome = t.run()?;
    match outcome {
        Outcome::Finished => println!(
            "training finished at step {} in {:.1}s; latest checkpoint {}",
            t.step(),
            started.elapsed().as_secs_f64(),
            t.latest_checkpoint().unwrap_or("-")
        ),
        Outcome::Stopped => println!(
            "training stopped at step {} on request; saved {}",
            t.step(),
            t.latest_checkpoint().unwrap_or("-")
        ),
    }
    Ok(())
}

/// `--run-dir` if given; else the run of the checkpoint being resumed; else a new
/// `run-<time>` directory under `<data_root>/checkpoints/`.
fn choose_run_dir(
    explicit: Option<&Path>,
    resume: Option<&Checkpoint>,
    root: &Path,
) -> Result<PathBuf> {
    if let Some(dir) = explicit {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("could not create the run directory {}", dir.display()))?;
        return Ok(dir.to_path_buf());
    }
    if let Some(parent) = resume.and_then(|c| c.path.parent())
        && parent
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(run::RUN_PREFIX))
    {
        return Ok(parent.to_path_buf());
    }
    Ok(run::create_run(root, lavender::time::now_utc())?.path)
}
