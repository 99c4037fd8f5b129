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

use serde::{Deserialize, Serialize};

/// A submitted job as `pipeline.json` keeps it: its id, and where and how it was
/// last seen (for the status).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub job_id: String,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the watcher saw of it beyond its state (boxed: a handle stays small
    /// in the pipeline's messages).
    #[serde(flatten)]
    pub seen: Box<JobSeen>,
}

/// A job's nodes and what happened to them, as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSeen {
    /// The allocation's nodes, the batch node first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// What happened to the job, for a person ("node n2 lost at step 120; waiting
    /// for 2 nodes"), while it matters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A node was lost and `on_node_failure: fail` cancelled the job: its end fails
    /// the pipeline instead of restarting it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed_on_node_loss: bool,
    /// The train step's run directory, where rank 0's heartbeat tells the step a lost
    /// node interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_dir: Option<std::path::PathBuf>,
}

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
