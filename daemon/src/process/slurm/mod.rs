//! The `slurm` launch backend: each step is one batch job; the worker runs under
//! `srun` inside it. Watched with `scontrol show job` (with `sacct` as a fallback
//! once the controller has forgotten the job), stopped with `scancel --signal`.

pub mod control;
pub mod nodes;
pub mod query;
pub mod script;
pub mod submit;
pub mod text;
pub mod watch;

pub use lavender::pipeline_file::{JobSeen, SlurmJob};

/// Runs a Slurm command and returns its stdout, or an error that names the command
/// and what it printed.
pub(crate) fn run(program: &str, args: &[String]) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| {
            format!(
                "run `{program}`: is Slurm's client installed and on PATH (package slurm-client)?"
            )
        })?;
    if !out.status.success() {
        anyhow::bail!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A Slurm job's place and state as last seen, for the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobUpdate {
    pub node: Option<String>,
    pub state: String,
    /// Why the job waits (`BeginTime`, `Resources`, …); none while it runs.
    pub reason: Option<String>,
    /// Its nodes, the batch node first; empty while pending.
    pub nodes: Vec<String>,
    /// What happened to it, for a person (a lost node), while it matters.
    pub message: Option<String>,
    /// A lost node made `on_node_failure: fail` cancel it.
    pub failed_on_node_loss: bool,
}

impl JobUpdate {
    pub fn new(
        state: String,
        node: Option<String>,
        reason: Option<String>,
        nodes: Vec<String>,
    ) -> JobUpdate {
        JobUpdate {
            node,
            state,
            reason,
            nodes,
            message: None,
            failed_on_node_loss: false,
        }
    }
}

/// Called by a Slurm watcher whenever the job's state or node changes.
pub type JobUpdates = Box<dyn Fn(JobUpdate) + Send + Sync>;
