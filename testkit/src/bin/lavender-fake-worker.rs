//! A stand-in for `lavender-worker` that speaks the worker protocol without
//! libtorch: heartbeats, events, complete checkpoints, save-on-SIGTERM. Flags (or
//! `FAKE_*` variables) make it misbehave the ways a real trainer can, so the
//! daemon's crash, stall and stop handling can be tested with real processes.
//!
//! `lavender-fake-worker [fault flags] <step> --config C --data-root D --run-dir R
//!  [--scale S] [--chunk N] [--resume PATH|latest]`
//!
//! Faults: crash (with an exit code, a signal, or a failure record of a kind),
//! hang (alive, no more heartbeats), stay silent at start, hold a save, ignore
//! SIGTERM, leave a helper behind.
//!
//! Started as one task of many (`srun --ntasks N` sets `SLURM_PROCID`, torchrun sets
//! `RANK`), only rank 0 writes heartbeats, events and checkpoints; the other ranks
//! step along in silence, like data-parallel replicas.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use lavender::checkpoint::CheckpointBuilder;
use lavender::checkpoint::{self, CheckpointName};
use lavender::events::{self, Event, kind};
use lavender::failure::{Failure, FailureKind};
use lavender::heartbeat::{self, Heartbeat, WorkerState};
use lavender::pipeline_step::{PipelineStep, StepKind};
use lavender::trainer_state::TrainerState;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

/// The exit code of a simulated crash.
const CRASH_EXIT: i32 = 3;
/// The exit code when `--resume` names nothing usable.
const RESUME_EXIT: i32 = 4;

#[derive(Parser, Debug)]
#[command(about = "A fake lavender worker for tests")]
struct Args {
    /// Pipeline step, parsed into the step table's type (`lavender::pipeline_step`).
    step: PipelineStep,
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    data_root: PathBuf,
    #[arg(long)]
    run_dir: Option<PathBuf>,
    #[arg(long)]
    scale: Option<String>,
    #[arg(long)]
    chunk: Option<u32>,
    #[arg(long)]
    resume: Option<String>,

    /// Steps of the fake training run.
    #[arg(long, env = "FAKE_TOTAL_STEPS", default_value_t = 50)]
    total_steps: u64,
    /// Milliseconds per training step.
    #[arg(long, env = "FAKE_STEP_MS", default_value_t = 20)]
    step_ms: u64,
    /// Milliseconds per training step from step `--slow-from` to `--slow-to` (a run
    /// that gets slower, then back to speed).
    #[arg(long, env = "FAKE_SLOW_STEP_MS")]
    slow_step_ms: Option<u64>,
    #[arg(long, env = "FAKE_SLOW_FROM", default_value_t = 0)]
    slow_from: u64,
    #[arg(long, env = "FAKE_SLOW_TO", default_value_t = u64::MAX)]
    slow_to: u64,
    /// Save a checkpoint every N steps.
    #[arg(long, env = "FAKE_CHECKPOINT_EVERY", default_value_t = 10)]
    checkpoint_every: u64,
    /// Bytes of each checkpoint's weights (0: a few bytes), a pattern of its step.
    #[arg(long, env = "FAKE_WEIGHTS_BYTES", default_value_t = 0)]
    weights_bytes: usize,
    /// Milliseconds a save takes (between "saving" and the checkpoint appearing).
    #[arg(long, env = "FAKE_SAVE_MS", default_value_t = 0)]
    save_ms: u64,
    /// Milliseconds a data step takes.
    #[arg(long, env = "FAKE_DATA_STEP_MS", default_value_t = 20)]
    data_step_ms: u64,
    /// Exit with a crash after this many steps of this process.
    #[arg(long, env = "FAKE_CRASH_AFTER")]
    crash_after: Option<u64>,
    /// Crash only the first K times in this run directory (default: every time).
    #[arg(long, env = "FAKE_CRASH_TIMES")]
    crash_times: Option<u32>,
    /// Crash by SIGABRT instead of a non-zero exit.
    #[arg(long, env = "FAKE_CRASH_SIGNAL")]
    crash_signal: bool,
    /// Stop making progress (and writing heartbeats) after this many steps, staying alive.
    #[arg(long, env = "FAKE_HANG_AFTER")]
    hang_after: Option<u64>,
    /// Hang only the first K times in this run directory (default: every time).
    #[arg(long, env = "FAKE_HANG_TIMES")]
    hang_times: Option<u32>,
    /// Write nothing (no heartbeat, no event) for this many milliseconds after starting.
    #[arg(long, env = "FAKE_SILENT_START_MS", default_value_t = 0)]
    silent_start_ms: u64,
    /// A crash says why, as a real worker does: its last heartbeat (`failed`) and a
    /// `failed` event carry `failure: {kind: KIND, …}` and it exits with the kind's
    /// code. `garbage` writes a failure record that does not parse. A list
    /// (`diverged,crash`) gives the n-th crash in the run directory the n-th kind,
    /// the last repeating.
    #[arg(long, env = "FAKE_CRASH_KIND")]
    crash_kind: Option<String>,
    /// A `diverged` failure says it began this many steps before the step it was
    /// detected at (`since_step`), so the daemon rolls back past it.
    #[arg(long, env = "FAKE_DIVERGED_SINCE_BACK")]
    diverged_since_back: Option<u64>,
    /// Ignore SIGTERM (so only SIGKILL ends it).
    #[arg(long, env = "FAKE_IGNORE_SIGTERM")]
    ignore_sigterm: bool,
    /// Start a helper process (in the worker's group) that ignores SIGTERM and
    /// outlives the worker, like a stuck data loader; its pid goes to
    /// `<data_root>/fake-helper.pid`.
    #[arg(long, env = "FAKE_SPAWN_HELPER")]
    spawn_helper: bool,
    /// Make this data step fail with exit code 1.
    #[arg(long, env = "FAKE_FAIL_STEP")]
    fail_step: Option<PipelineStep>,
    /// Print this many numbered lines to stdout each training step (a chatty trainer,
    /// for the log's rotation).
    #[arg(long, env = "FAKE_CHATTER", default_value_t = 0)]
    chatter: u32,
    /// Leave retention to the daemon. By default it declares in `run_started`, like
    /// `lavender-worker`, that it prunes its own checkpoints (it keeps them all).
    #[arg(long, env = "FAKE_DAEMON_RETENTION")]
    daemon_retention: bool,
}

static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: nix::libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

fn install_sigterm(ignore: bool) -> Result<()> {
    let handler = if ignore {
        SigHandler::SigIgn
    } else {
        SigHandler::Handler(on_term)
    };
    let action = SigAction::new(handler, SaFlags::SA_RESTART, SigSet::empty());
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { sigaction(Signal::SIGTERM, &action) }.context("install SIGTERM handler")?;
    Ok(())
}

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("fake-worker: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// This task's rank among the run's processes (0 when started alone).
fn rank() -> u32 {
    ["SLURM_PROCID", "RANK"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(0)
}

fn run(args: &Args) -> Result<i32> {
    install_sigterm(args.ignore_sigterm)?;
    record_call(&args.data_root)?;
    println!("fake-worker: step {} pid {}", args.step, std::process::id());
    if args.step.kind() != StepKind::Train {
        return data_step(args);
    }
    if args.spawn_helper {
        let helper = std::process::Command::new("sh")
            .args(["-c", "trap '' TERM; exec sleep 600"])
            .stdin(std::process::Stdio::null())
            .spawn()
            .context("spawn helper")?;
        std::fs::write(
            args.data_root.join("fake-helper.pid"),
            helper.id().to_string(),
        )?;
    }
    let run_dir = args
        .run_dir
        .clone()
        .context("the train step needs --run-dir")?;
    // A start that takes long (imports, compilation) before the first heartbeat.
    std::thread::sleep(Duration::from_millis(args.silent_start_ms));
    std::fs::create_dir_all(&run_dir).with_context(|| format!("create {}", run_dir.display()))?;
    Trainer::new(args, run_dir)?.train()
}

/// Appends this invocation's argv to `<data_root>/fake-worker-calls.jsonl`, so tests
/// can check what the daemon passed (e.g. `--resume` after a crash).
fn record_call(data_root: &Path) -> Result<()> {
    std::fs::create_dir_all(data_root)?;
    let path = data_root.join("fake-worker-calls.jsonl");
    let line = serde_json::json!({
        "pid": std::process::id(),
        "rank": rank(),
        "argv": std::env::args().collect::<Vec<_>>(),
        "force": std::env::var("LAVENDER_FORCE").ok(),
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    // One write per line: ranks append at once, and a formatted write would interleave.
    f.write_all(format!("{line}\n").as_bytes())?;
    Ok(())
}

/// A data step: wait a little, beating (`<run>/step_heartbeat.json` every 100 ms, as
/// `lavender-worker`'s progress lines do), write the step's manifest (so status has
/// counts), exit.
fn data_step(args: &Args) -> Result<i32> {
    let deadline = Instant::now() + Duration::from_millis(args.data_step_ms);
    let mut beat_at = Instant::now();
    let mut items = 0;
    while Instant::now() < deadline {
        if TERM.load(Ordering::SeqCst) {
            println!("fake-worker: {} interrupted", args.step);
            return Ok(0);
        }
        if let Some(run_dir) = &args.run_dir
            && Instant::now() >= beat_at
        {
            std::fs::create_dir_all(run_dir)?;
            let beat = lavender::step_heartbeat::StepHeartbeat::now(args.step.as_str(), items);
            lavender::step_heartbeat::write(run_dir, &beat)?;
            beat_at += Duration::from_millis(100);
            items += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if args.fail_step == Some(args.step) {
        eprintln!("fake-worker: {} failed as asked", args.step);
        return Ok(1);
    }
    let counts: serde_json::Map<String, serde_json::Value> = match args.step {
        PipelineStep::Downloads => [("documents", 100), ("sources", 1), ("bytes", 4096)].as_slice(),
        PipelineStep::BuildShards => [("shard_count", 4), ("documents", 90)].as_slice(),
        PipelineStep::Precompute => [("tokens", 12345), ("vocab_size", 256)].as_slice(),
        PipelineStep::MineHard => [("hard_examples", 7)].as_slice(),
        _ => [].as_slice(),
    }
    .iter()
    .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
    .collect();
    let manifest: lavender::manifest::StepManifest = serde_json::from_value(serde_json::json!({
        "step": args.step, "version": 1, "config_hash": "fake", "inputs": [],
        "counts": counts, "outputs": [], "finished_at": lavender::time::rfc3339_z(lavender::time::now_utc()),
    }))
    .context("build manifest")?;
    lavender::manifest::write(&args.data_root, &manifest)?;
    println!("fake-worker: {} done", args.step);
    Ok(0)
}

/// A falling loss with a deterministic wiggle, so curves look like curves.
fn loss_at(step: u64) -> f64 {
    let s = step as f64;
    4.0 / (1.0 + s / 10.0) + 0.15 * (s * 1.7).sin().abs()
}

struct Trainer<'a> {
    args: &'a Args,
    run_dir: PathBuf,
    step: u64,
    latest: Option<String>,
    /// Rank 0 writes; the other ranks only step.
    writes: bool,
}

impl<'a> Trainer<'a> {
    fn new(args: &'a Args, run_dir: PathBuf) -> Result<Self> {
        let mut t = Trainer {
            args,
            run_dir,
            step: 0,
            latest: None,
            writes: rank() == 0,
        };
        if let Some(spec) = &args.resume {
            let root = args.data_root.join(lavender::data_root::CHECKPOINTS);
            match checkpoint::resolve_resume(spec, &root) {
                Ok(ckpt) => {
                    t.step = ckpt.state.step;
                    t.latest = Some(ckpt.name.clone());
                    if !t.writes {
                        return Ok(t);
                    }
                    events::append(
                        &t.run_dir,
                        &Event::new(
                            kind::CHECKPOINT_LOADED,
                            format!("resumed from {}", ckpt.name),
                        )
                        .with("path", ckpt.path.display().to_string())
                        .with("step", ckpt.state.step),
                    )?;
                    println!(
                        "fake-worker: resumed from {} at step {}",
                        ckpt.path.display(),
                        t.step
                    );
                }
                Err(e) => {
                    eprintln!("fake-worker: cannot resume: {e}");
                    std::process::exit(RESUME_EXIT);
                }
            }
        }
        Ok(t)
    }

    fn heartbeat(&self, state: WorkerState) -> Result<()> {
        if !self.writes {
            return Ok(());
        }
        heartbeat::write(&self.run_dir, &self.heartbeat_record(state))?;
        Ok(())
    }

    fn heartbeat_record(&self, state: WorkerState) -> Heartbeat {
        let sps = 1000.0 / self.args.step_ms.max(1) as f64;
        let remaining = self.args.total_steps.saturating_sub(self.step);
        Heartbeat {
            step: self.step,
            total_steps: self.args.total_steps,
            stage: "pretrain".into(),
            epoch: Some(self.step as f64 / self.args.total_steps.max(1) as f64),
            epochs: Some(1),
            loss: Some(loss_at(self.step)),
            loss_smooth: Some(4.0 / (1.0 + self.step as f64 / 12.0)),
            lr: Some(1e-3),
            grad_norm: Some(1.0),
            steps_per_sec: Some(sps),
            eta_seconds: Some((remaining as f64 / sps) as u64),
            timestamp: lavender::time::rfc3339_z(lavender::time::now_utc()),
            pid: std::process::id(),
            state,
            latest_checkpoint: self.latest.clone(),
            failure: None,
        }
    }

    /// One `log_history.jsonl` line per step (Hugging Face keys, like the real
    /// worker's sidecar, and `time`: when the step ended, Unix seconds), and an
    /// `eval_loss` entry every 10 steps. The same lines go to `.fake-timeline.jsonl`,
    /// which nothing cuts back at a resume (the daemon cuts the record back to the
    /// checkpoint): the ground truth of the goodput tests.
    fn log_history(&self) -> Result<()> {
        if !self.writes {
            return Ok(());
        }
        let path = self.run_dir.join("log_history.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("open {}", path.display()))?;
        let epoch = self.step as f64 / self.args.total_steps.max(1) as f64;
        let mut lines = serde_json::json!({
            "step": self.step, "epoch": epoch, "learning_rate": 1e-3,
            "loss": loss_at(self.step), "grad_norm": 1.0, "stage": "pretrain",
            "time": lavender::time::now_utc().timestamp_millis() as f64 / 1000.0,
        })
        .to_string();
        if self.step.is_multiple_of(10) {
            let eval = serde_json::json!({
                "step": self.step, "epoch": epoch, "eval_loss": loss_at(self.step) * 1.1, "stage": "pretrain",
            });
            lines.push('\n');
            lines.push_str(&eval.to_string());
        }
        lines.push('\n');
        f.write_all(lines.as_bytes())
            .with_context(|| format!("append to {}", path.display()))?;
        let timeline = self.run_dir.join(".fake-timeline.jsonl");
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&timeline)
            .and_then(|mut f| f.write_all(lines.as_bytes()))
            .with_context(|| format!("append to {}", timeline.display()))
    }

    fn save(&mut self, final_kind: &str) -> Result<()> {
        if !self.writes {
            return Ok(());
        }
        self.heartbeat(WorkerState::Saving)?;
        std::thread::sleep(Duration::from_millis(self.args.save_ms));
        let counter = checkpoint::next_counter(&self.run_dir)?;
        let now = lavender::time::now_utc();
        let name = CheckpointName::new("pretrain", now.time(), counter)?;
        let builder = CheckpointBuilder::begin(&self.run_dir, &name)?;
        let weights = match self.args.weights_bytes {
            0 => b"fake weights".to_vec(),
            n => (0..n)
                .map(|i| (i as u64).wrapping_mul(31).wrapping_add(self.step) as u8)
                .collect(),
        };
        std::fs::write(builder.dir().join("model.safetensors"), weights)?;
        let mut state = TrainerState::new("pretrain", self.step);
        state.total_steps = self.args.total_steps;
        state.stage_step = self.step;
        state.saved_at = lavender::time::rfc3339_z(now);
        let path = builder.commit(&state)?;
        lavender::trainlog::log_save(&self.run_dir, &name.to_string(), now)?;
        self.latest = Some(name.to_string());
        events::append(
            &self.run_dir,
            &Event::new(final_kind, format!("saved {name} at step {}", self.step))
                .with("path", path.display().to_string())
                .with("step", self.step),
        )?;
        println!("fake-worker: saved {}", path.display());
        Ok(())
    }

    fn hangs_so_far(&self) -> u32 {
        std::fs::read_to_string(self.run_dir.join(".fake-hangs"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    fn crashes_so_far(&self) -> u32 {
        std::fs::read_to_string(self.run_dir.join(".fake-crashes"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    fn crash(&self) -> Result<i32> {
        let n = self.crashes_so_far() + 1;
        std::fs::write(self.run_dir.join(".fake-crashes"), n.to_string())?;
        eprintln!("fake-worker: crashing at step {} as asked", self.step);
        if let Some(kinds) = &self.args.crash_kind {
            let kinds: Vec<&str> = kinds.split(',').collect();
            let kind = kinds[(n as usize - 1).min(kinds.len() - 1)];
            return self.fail_with(kind);
        }
        if self.args.crash_signal {
            nix::sys::signal::raise(Signal::SIGABRT)?;
        }
        Ok(CRASH_EXIT)
    }

    /// Ends as a worker that knows why: a `failed` heartbeat and event with the
    /// failure record, then the kind's exit code.
    fn fail_with(&self, kind: &str) -> Result<i32> {
        let (record, code) = match serde_json::from_value::<FailureKind>(serde_json::json!(kind)) {
            Ok(kind) => {
                let mut failure =
                    Failure::new(kind, format!("fake {kind} failure at step {}", self.step));
                failure.step = Some(self.step);
                if kind == FailureKind::Diverged {
                    failure.since_step = self
                        .args
                        .diverged_since_back
                        .map(|back| self.step.saturating_sub(back));
                }
                (serde_json::to_value(&failure)?, kind.exit_code())
            }
            Err(_) => (
                serde_json::json!({"kind": kind, "why": "not a failure record"}),
                1,
            ),
        };
        let mut hb = serde_json::to_value(self.heartbeat_record(WorkerState::Failed))?;
        hb["failure"] = record.clone();
        lavender::atomic::write_json(&heartbeat::path(&self.run_dir), &hb)?;
        events::append(
            &self.run_dir,
            &Event::new(kind::FAILED, format!("failed at step {}", self.step))
                .with("failure", record),
        )?;
        Ok(code)
    }

    /// After SIGTERM: save, write the final heartbeat (`stopping`) and exit 0.
    fn stop(&mut self) -> Result<i32> {
        println!("fake-worker: SIGTERM at step {}, saving", self.step);
        self.save(kind::FINAL_SAVED)?;
        self.heartbeat(WorkerState::Stopping)?;
        Ok(0)
    }

    fn train(mut self) -> Result<i32> {
        if self.args.checkpoint_every == 0 {
            bail!("--checkpoint-every must be at least 1");
        }
        if self.writes {
            events::append(
                &self.run_dir,
                &Event::new(kind::RUN_STARTED, "fake run started")
                    .with("step", self.step)
                    .with(
                        events::RETENTION_FIELD,
                        if self.args.daemon_retention {
                            "daemon"
                        } else {
                            events::RETENTION_BY_WORKER
                        },
                    ),
            )?;
        }
        self.heartbeat(WorkerState::Starting)?;
        let mut done_here = 0u64;
        let mut hanging = false;
        while self.step < self.args.total_steps {
            if TERM.load(Ordering::SeqCst) {
                return self.stop();
            }
            if hanging
                || self.args.hang_after.is_some_and(|n| done_here >= n)
                    && self.args.hang_times.is_none_or(|k| self.hangs_so_far() < k)
            {
                if !hanging {
                    hanging = true;
                    let n = self.hangs_so_far() + 1;
                    std::fs::write(self.run_dir.join(".fake-hangs"), n.to_string())?;
                    eprintln!("fake-worker: hanging at step {} as asked", self.step);
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            if self.writes
                && self.args.crash_after.is_some_and(|n| done_here >= n)
                && self
                    .args
                    .crash_times
                    .is_none_or(|k| self.crashes_so_far() < k)
            {
                return self.crash();
            }
            let slow = (self.args.slow_from..self.args.slow_to).contains(&self.step);
            let ms = match self.args.slow_step_ms {
                Some(ms) if slow => ms,
                _ => self.args.step_ms,
            };
            std::thread::sleep(Duration::from_millis(ms));
            self.step += 1;
            done_here += 1;
            if self.args.chatter > 0 {
                let mut out = std::io::stdout().lock();
                for i in 0..self.args.chatter {
                    writeln!(
                        out,
                        "fake-worker: chatter step {:06} line {i:03}",
                        self.step
                    )?;
                }
                out.flush()?;
            }
            self.log_history()?;
            self.heartbeat(WorkerState::Training)?;
            if self.step.is_multiple_of(self.args.checkpoint_every)
                && self.step < self.args.total_steps
            {
                self.save(kind::CHECKPOINT_SAVED)?;
                self.heartbeat(WorkerState::Training)?;
            }
        }
        self.save(kind::FINAL_SAVED)?;
        self.heartbeat(WorkerState::Finished)?;
        println!("fake-worker: finished at step {}", self.step);
        Ok(0)
    }
}
