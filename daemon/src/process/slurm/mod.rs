//! The `slurm` launch backend: each step is one batch job; the worker runs under
//! `srun` inside it. Watched with `scontrol show job` (with `sacct` as a fallback
//! once the controller has forgotten the job), stopped with `scancel --signal`.

pub mod control;
pub mod query;
pub mod script;
pub mod submit;
pub mod watch;

use serde::{Deserialize, Serialize};

/// A submitted job as `pipeline.json` keeps it: its id, and where and how it was
/// last seen (for the status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub job_id: String,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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
