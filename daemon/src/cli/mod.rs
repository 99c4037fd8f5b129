//! The command line: `serve | start | stop | daemon restart | status | logs | runs |
//! checkpoints | verify | prune | export | resolve | attribute | notify test | config check |
//! service`. Commands that change the pipeline talk to the daemon over its Unix socket;
//! read-only ones work from the files, daemon or not.

pub mod commands;
pub(crate) mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use lavender::config::Scale;
use lavender_api::StartRequest;

use crate::settings::GlobalArgs;

/// lavenderd: supervise a training pipeline (daemon and CLI).
#[derive(Parser, Debug)]
#[command(version, about)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Invocation,
}

/// What the binary is asked to do: the hidden `log-relay`, which runs before any
/// thread exists (it forks), or one of the commands, which run on the async runtime.
#[derive(Subcommand, Debug)]
pub enum Invocation {
    /// The relay between a worker's output and its rotating log (started by the
    /// daemon for each worker; not for people).
    #[command(hide = true)]
    LogRelay(LogRelayArgs),
    #[command(flatten)]
    Command(Command),
}

#[derive(Args, Debug, Clone, Default)]
pub struct ListenArgs {
    /// HTTP address (default: supervisor.listen, 127.0.0.1:7070).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Allow a non-loopback --listen address (every route then needs the token, reads
    /// too unless api.public_reads; clients must use a name in api.allowed_hosts).
    #[arg(long)]
    pub allow_non_loopback: bool,
}

/// Timings tests inject into `serve` (hidden: operators use the config).
#[derive(Args, Debug, Clone, Default)]
pub struct TuningArgs {
    /// The status refresher's periodic safety tick in milliseconds (default 2000);
    /// tests lengthen it to show that file events alone keep the status current.
    #[arg(long, hide = true, value_name = "MS")]
    pub status_safety_refresh_ms: Option<u64>,
    /// Make the native file watcher fail as if the inotify limit were reached.
    #[cfg(feature = "test-hooks")]
    #[arg(long, hide = true)]
    pub simulate_inotify_exhausted: bool,
}

impl TuningArgs {
    pub fn status_options(&self) -> crate::daemon::RefreshOptions {
        let mut opts = crate::daemon::RefreshOptions::default();
        if let Some(ms) = self.status_safety_refresh_ms {
            opts.safety_refresh = std::time::Duration::from_millis(ms.max(1));
        }
        #[cfg(feature = "test-hooks")]
        {
            opts.simulate_inotify_exhausted = self.simulate_inotify_exhausted;
        }
        opts
    }
}

#[derive(Args, Debug, Clone)]
pub struct PipelineFlags {
    /// tiny | small | medium | large (default: the config's scale).
    #[arg(long)]
    pub scale: Option<Scale>,
    /// Resume from a checkpoint directory, a run directory (its newest checkpoint), a
    /// file inside a checkpoint (e.g. its model.safetensors), or `latest`.
    #[arg(long, value_name = "PATH|latest")]
    pub resume: Option<String>,
    /// Training chunk 1..4; chunks 2-4 continue from the previous chunk's latest checkpoint.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub chunk: Option<u32>,
    /// Run the data steps only (skip train and what follows it).
    #[arg(long)]
    pub skip_train: bool,
    /// Train from step 0 in a new run although an unfinished run could be resumed
    /// (without --resume or --fresh such a start is refused). Asks first on a terminal.
    #[arg(long, conflicts_with = "resume")]
    pub fresh: bool,
    /// Run this chunk's steps again, finished or not, from --from-step (default: the first).
    #[arg(long)]
    pub force: bool,
    /// With --force: the step to run again from (it and every step after it).
    #[arg(long, value_name = "STEP", requires = "force")]
    pub from_step: Option<String>,
    /// Start over (--fresh) without asking (needed when there is no terminal to ask on).
    #[arg(long)]
    pub yes: bool,
}

impl PipelineFlags {
    /// The request these flags make; a `--from-step` that is not one of `config`'s
    /// steps is a one-line error listing them.
    pub fn request(
        &self,
        data_root: Option<PathBuf>,
        config: &lavender::config::Config,
    ) -> anyhow::Result<StartRequest> {
        let resume = self.resume.as_ref().map(|r| {
            if r == "latest" {
                r.clone()
            } else {
                std::path::absolute(r)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| r.clone())
            }
        });
        let from_step = self
            .from_step
            .as_deref()
            .map(|name| config.step_named(name).map_err(anyhow::Error::msg))
            .transpose()?;
        Ok(StartRequest {
            scale: self.scale,
            resume,
            chunk: self.chunk,
            skip_train: self.skip_train,
            fresh: self.fresh,
            force: self.force,
            from_step,
            data_root,
            config: None,
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the daemon in the foreground: API on TCP and the Unix socket.
    Serve(ServeArgs),
    /// Start the pipeline (starting a background daemon if none runs).
    Start(StartArgs),
    /// Stop the pipeline: SIGTERM, wait for the save, SIGKILL after the timeout.
    /// Exit code 0: the stop saved a checkpoint; 3: stopped, no checkpoint saved; 4: nothing was running.
    Stop {
        /// Seconds to wait after SIGTERM before SIGKILL (default: supervisor.stop_timeout_s).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<f64>,
    },
    /// Have the daemon read its config file again (as SIGHUP does) and say, key by
    /// key, what changed and when it takes effect.
    Reload,
    /// The daemon itself, apart from the pipeline.
    Daemon {
        #[command(subcommand)]
        action: DaemonAction,
    },
    /// Pipeline status (works without a daemon, from the files).
    Status(StatusArgs),
    /// Show the pipeline log.
    Logs {
        /// Keep printing new lines.
        #[arg(short, long)]
        follow: bool,
        /// Lines to show.
        #[arg(short = 'n', long = "lines", default_value_t = 30)]
        lines: usize,
    },
    /// What the daemon decided by itself (restarts, hang kills, rollbacks, giving
    /// up, …): what it saw, the rule that fired, what it did and how that turned out
    /// (from state/decisions.jsonl; works without a daemon).
    Incidents {
        /// The decisions as JSON (each with its outcome, null until known).
        #[arg(long)]
        json: bool,
        /// Only the newest N decisions.
        #[arg(short = 'n', long = "last", value_name = "N")]
        last: Option<usize>,
    },
    /// Look inside the running worker.
    Debug {
        #[command(subcommand)]
        action: DebugAction,
    },
    /// List run directories, newest first.
    Runs {
        #[arg(long)]
        json: bool,
    },
    /// List the complete checkpoints of a run (default: the newest run); with
    /// replicate.url set, each one's copies: local, remote or local+remote.
    Checkpoints {
        /// Run name (run-YYYY-MM-DD_HH-MM-SS) or path.
        #[arg(long, value_name = "ID")]
        run: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Check checkpoints against their manifests, reading every byte (default: the
    /// newest run). Exit code 0 only when every checkpoint with a manifest verifies.
    Verify {
        /// Run name (run-YYYY-MM-DD_HH-MM-SS) or path.
        #[arg(long, value_name = "ID", conflicts_with = "all")]
        run: Option<String>,
        /// Every run of the data root.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Resume a kept, verified checkpoint in a sandbox (a worker of its own at the
    /// lowest priority, one thread, writing only into a scratch folder removed after),
    /// train a few steps and compare them with what the run recorded for them.
    /// Exit code 0 when they agree, 1 when a step differs, 2 when the drill could not run.
    Drill {
        /// Run name (run-YYYY-MM-DD_HH-MM-SS) or path (default: the newest run).
        #[arg(long, value_name = "ID")]
        run: Option<String>,
        /// Checkpoint name (default: the run's newest verified checkpoint).
        #[arg(long, value_name = "NAME")]
        checkpoint: Option<String>,
        /// Steps to train (default: up to the next step the run recorded, at most 50).
        #[arg(long, value_name = "K")]
        steps: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Delete old run directories, keeping the newest N (never the active run).
    /// Asks first on a terminal; without one it needs --yes.
    Prune {
        #[arg(long, value_name = "N")]
        keep_runs: usize,
        /// Delete without asking (needed when there is no terminal to ask on).
        #[arg(long)]
        yes: bool,
        /// Delete the pruned runs' copies on the replication target (replicate.url)
        /// too; without it they are kept there.
        #[arg(long)]
        remote: bool,
    },
    /// Fetch a checkpoint from the replication target (replicate.url) into the data
    /// root, verified against its manifest: the newest of RUN (default: of any run),
    /// or CHECKPOINT of RUN.
    Pull {
        /// Run name (run-YYYY-MM-DD_HH-MM-SS).
        run: Option<String>,
        /// Checkpoint name (e.g. train-12-00-05-0005).
        checkpoint: Option<String>,
    },
    /// Export a run's checkpoints for Hugging Face / attribution tools (no libtorch).
    Export(ExportArgs),
    /// Print a bergson SOURCE config fragment (`approx_unrolling_cfg`) for exported
    /// CHECKPOINTs, filling lr_list, step_size_list, momentum and
    /// use_adam_preconditioner from the run that produced them.
    Resolve(ResolveArgs),
    /// Rank a run's training documents for each query by bergson's SOURCE over the
    /// run's exported checkpoints (needs bergson: scripts/attribution-setup.sh).
    Attribute(AttributeArgs),
    /// Push notifications.
    Notify {
        #[command(subcommand)]
        action: NotifyAction,
    },
    /// Check the config file and print it fully resolved.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Run lavenderd as a service (systemd, launchd): install, uninstall, status.
    Service {
        #[command(subcommand)]
        action: crate::service::ServiceAction,
    },
}

impl Command {
    /// `start --foreground`: the daemon runs in this terminal with its view.
    pub fn is_foreground(&self) -> bool {
        matches!(self, Command::Start(s) if s.foreground)
    }
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub listen: ListenArgs,
    #[command(flatten)]
    pub tuning: TuningArgs,
    /// Leave a pipeline interrupted by the previous daemon's exit stopped (as
    /// `supervisor.resume_on_start: false`); `start` passes it to the daemon it
    /// starts, since its own request says what to run.
    #[arg(long, hide = true)]
    pub no_resume: bool,
}

#[derive(Args, Debug)]
pub struct StartArgs {
    #[command(flatten)]
    pub flags: PipelineFlags,
    /// Run daemon and pipeline in this terminal with a progress line; Ctrl-C stops gracefully.
    #[arg(long)]
    pub foreground: bool,
    #[command(flatten)]
    pub listen: ListenArgs,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The status contract as JSON.
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Redraw a compact view every --interval seconds (Ctrl-C ends it).
    #[arg(long)]
    pub watch: bool,
    /// Seconds between redraws with --watch.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 2.0,
        requires = "watch"
    )]
    pub interval: f64,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    #[arg(long, num_args = 1.., conflicts_with = "all", value_name = "NAME")]
    pub checkpoints: Vec<String>,
    #[arg(long)]
    pub all: bool,
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[arg(long)]
    pub force: bool,
    /// Export the weights' moving average (training.ema) instead of the weights,
    /// into <run>/exported-ema/ unless --out says otherwise.
    #[arg(long)]
    pub ema: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ResolveArgs {
    #[arg(required = true, value_name = "CHECKPOINT")]
    pub checkpoints: Vec<PathBuf>,
    /// Segments SOURCE splits the checkpoints into (must divide their number; default: one per checkpoint).
    #[arg(long, value_name = "L")]
    pub segments: Option<usize>,
    #[arg(long, value_name = "P")]
    pub model_path: Option<PathBuf>,
    /// SOURCE's momentum: heavy-ball SGD β (default from the run: 0.0 for AdamW).
    #[arg(long, value_name = "B")]
    pub momentum: Option<f64>,
    /// Every step's learning rate, step 1 first (default: the run's log_history.json).
    #[arg(long, value_name = "LRS|@FILE")]
    pub step_lrs: Option<String>,
    /// SOURCE's per-segment average learning rates (with --step-size-list).
    #[arg(long, value_name = "LRS|@FILE", requires = "step_size_list")]
    pub lr_list: Option<String>,
    /// SOURCE's per-segment optimizer step counts (with --lr-list).
    #[arg(long, value_name = "NS|@FILE", requires = "lr_list")]
    pub step_size_list: Option<String>,
    #[arg(long, value_name = "BOOL")]
    pub use_adam_preconditioner: Option<bool>,
    /// The full resolution as JSON (values, their sources, per-segment lr×steps).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct AttributeArgs {
    /// Run name (run-YYYY-MM-DD_HH-MM-SS) or path; its checkpoints must be exported.
    #[arg(long, value_name = "ID")]
    pub run: String,
    /// Queries: JSONL, one {"text": ...} per line.
    #[arg(long, value_name = "FILE.jsonl")]
    pub queries: PathBuf,
    /// Training documents to score: JSONL, one {"text": ...} per line.
    #[arg(long, value_name = "FILE.jsonl", conflicts_with = "from_run")]
    pub train: Option<PathBuf>,
    /// Score the run's own training text (its data root's filtered corpus; the default).
    #[arg(long)]
    pub from_run: bool,
    /// Documents to show per query.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub top: usize,
    /// Segments SOURCE splits the checkpoints into (must divide their number; default: one per checkpoint).
    #[arg(long, value_name = "L")]
    pub segments: Option<usize>,
    /// Where to write the JSON result (default: <run>/attribution/<time>/attribution.json).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Python with bergson 2.5.1 (default: ./.venv/bin/python, else python3).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Tokens per SOURCE batch (rows × the longest row), at least the model's context.
    #[arg(long, value_name = "N", default_value_t = lavender_export::attribute::BATCH_TOKENS)]
    pub batch_tokens: u64,
    /// Compute the query-independent Hessian passes afresh and do not keep them
    /// (default: reuse and keep them in <run>/attribution/cache/).
    #[arg(long)]
    pub no_cache: bool,
    /// Score an evenly spaced sample of at most N of the run's training windows
    /// (every k-th in the trainer's order), the Hessians estimated on the same
    /// sample: minutes instead of hours on a large run (default: all of them).
    #[arg(long, value_name = "N", conflicts_with = "train")]
    pub windows: Option<usize>,
    /// Print the result as JSON (progress as JSON lines on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LogRelayArgs {
    #[arg(long, value_name = "PATH")]
    pub file: PathBuf,
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: u64,
    #[arg(long, value_name = "N")]
    pub keep: u32,
}

impl LogRelayArgs {
    /// `log-relay`: runs before anything else (it forks, so no thread may exist yet);
    /// the process's exit code.
    pub fn run(&self) -> std::process::ExitCode {
        let limits = lavender::config::LoggingConfig {
            max_bytes: self.max_bytes,
            keep: self.keep,
        };
        crate::logs::relay::run(&self.file, limits)
    }
}

#[derive(Subcommand, Debug)]
pub enum ConfigAction {
    /// Validate the config and print it fully resolved.
    Check,
}

#[derive(Subcommand, Debug)]
pub enum DaemonAction {
    /// Restart the daemon alone (after an upgrade): it executes its binary again in
    /// place and re-adopts the worker, which keeps training. (`systemctl restart`
    /// and SIGTERM stop the pipeline with a save.)
    Restart,
    /// End the daemon (one started in the background by `lavenderd start`) as SIGTERM
    /// or a service stop does: the pipeline stops with a save first, then the daemon
    /// exits. Exit code 4 when no daemon runs.
    Stop,
}

#[derive(Subcommand, Debug)]
pub enum DebugAction {
    /// Take the evidence a hang would get, now, without stopping anything: every
    /// thread's stack of each process of the worker (py-spy, eu-stack), /proc state,
    /// open files, the last heartbeat and log lines, into <run>/incidents/<time>-stacks/.
    /// Exit code 4 when no local worker runs.
    Stacks,
}

#[derive(Subcommand, Debug)]
pub enum NotifyAction {
    /// Send a test push on every configured channel (or one) and print each answer.
    /// Exit code 1 if any failed or none is configured.
    Test {
        #[arg(long, value_name = "NAME")]
        channel: Option<String>,
    },
}
