//! The `launch:` section: where the daemon runs each step. `local` starts the worker
//! as a process group on this machine; `slurm` submits each step as a batch job and
//! runs the worker under `srun`. Every key has a default, so configs written before
//! this section existed still load (as `local`).

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, ConfigErrorKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LaunchBackend {
    #[default]
    Local,
    Slurm,
}

impl LaunchBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            LaunchBackend::Local => "local",
            LaunchBackend::Slurm => "slurm",
        }
    }
}

impl std::fmt::Display for LaunchBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to a job when one of its nodes dies (`launch.slurm.on_node_failure`).
/// Slurm notices a node that stopped answering (`SlurmdTimeout`), marks it DOWN and
/// ends the job's steps on the other nodes; what the job does next is this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeFailurePolicy {
    /// Back to the queue (Slurm's own requeue: the same job id): it runs again as
    /// soon as the partition has as many nodes free, and resumes from the run's
    /// latest complete checkpoint.
    #[default]
    Requeue,
    /// Back to the queue, held to the nodes it ran on: it runs again only once the
    /// lost node is back (a job that must keep its hosts, e.g. for local scratch).
    Wait,
    /// The job is cancelled and the pipeline fails, naming the node; `lavenderd start
    /// --resume latest` continues from the latest checkpoint when you choose.
    Fail,
}

impl NodeFailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeFailurePolicy::Requeue => "requeue",
            NodeFailurePolicy::Wait => "wait",
            NodeFailurePolicy::Fail => "fail",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LaunchConfig {
    pub backend: LaunchBackend,
    pub slurm: SlurmConfig,
}

/// `sbatch` options of a step's batch job. `None` leaves the choice to the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmConfig {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--gres`, e.g. `gpu:4`.
    pub gres: Option<String>,
    /// `--cpus-per-task`.
    pub cpus_per_task: Option<u32>,
    /// `--mem`, e.g. `32G`.
    pub mem: Option<String>,
    /// `--time`, in Slurm's forms (`30`, `4:00:00`, `1-00:00:00`).
    pub time_limit: Option<String>,
    /// `srun --ntasks` (and the allocation's): e.g. one task per GPU for torchrun-style runs.
    pub ntasks: u32,
    /// `--nodes`.
    pub nodes: u32,
    /// Seconds before the time limit at which the batch job is told to save
    /// (`--signal=B:TERM@<grace>`); it then requeues itself and resumes from `latest`.
    pub grace_s: u32,
    /// Requeue the job (and resume) when it hits its time limit or is preempted.
    pub requeue: bool,
    /// More `sbatch` arguments, passed as they are (e.g. `--qos=high`).
    pub extra_args: Vec<String>,
    /// Seconds between two `squeue` looks at a job.
    pub poll_interval_s: u64,
    /// A node of the job lost: requeue (default), wait for the same nodes, or fail.
    pub on_node_failure: NodeFailurePolicy,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            partition: None,
            account: None,
            gres: None,
            cpus_per_task: None,
            mem: None,
            time_limit: None,
            ntasks: 1,
            nodes: 1,
            grace_s: 120,
            requeue: true,
            extra_args: Vec::new(),
            poll_interval_s: 2,
            on_node_failure: NodeFailurePolicy::Requeue,
        }
    }
}

impl LaunchConfig {
    pub fn is_default(&self) -> bool {
        *self == LaunchConfig::default()
    }
}

fn invalid(path: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(ConfigErrorKind::Invalid {
        path: path.to_string(),
        message: message.into(),
    })
}

/// True for Slurm's time forms: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`, or
/// `UNLIMITED`/`INFINITE`.
fn is_slurm_time(text: &str) -> bool {
    if matches!(text, "UNLIMITED" | "INFINITE") {
        return true;
    }
    let (days, rest) = match text.split_once('-') {
        Some((d, r)) => (Some(d), r),
        None => (None, text),
    };
    let number = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if days.is_some_and(|d| !number(d)) {
        return false;
    }
    let parts: Vec<&str> = rest.split(':').collect();
    parts.len() <= 3 && parts.iter().all(|p| number(p))
}

pub(crate) fn validate(l: &LaunchConfig) -> Result<(), ConfigError> {
    let s = &l.slurm;
    if s.ntasks == 0 {
        return Err(invalid(
            "launch.slurm.ntasks",
            "must be at least 1 (one task per process of the run)",
        ));
    }
    if s.nodes == 0 || s.nodes > s.ntasks {
        return Err(invalid(
            "launch.slurm.nodes",
            format!(
                "{} nodes for {} task(s): give 1..=ntasks nodes",
                s.nodes, s.ntasks
            ),
        ));
    }
    if s.poll_interval_s == 0 {
        return Err(invalid(
            "launch.slurm.poll_interval_s",
            "must be at least 1 second",
        ));
    }
    if let Some(t) = &s.time_limit
        && !is_slurm_time(t)
    {
        return Err(invalid(
            "launch.slurm.time_limit",
            format!("`{t}` is not a Slurm time; write minutes (`30`), `H:MM:SS` or `D-HH:MM:SS`"),
        ));
    }
    if s.cpus_per_task == Some(0) {
        return Err(invalid(
            "launch.slurm.cpus_per_task",
            "must be at least 1, or null for the cluster's default",
        ));
    }
    for (key, value) in [
        ("partition", &s.partition),
        ("account", &s.account),
        ("gres", &s.gres),
        ("mem", &s.mem),
    ] {
        if let Some(v) = value
            && (v.trim().is_empty() || v.contains(char::is_whitespace))
        {
            return Err(invalid(
                &format!("launch.slurm.{key}"),
                format!("`{v}` must be one word without spaces, or null"),
            ));
        }
    }
    for (i, arg) in s.extra_args.iter().enumerate() {
        if !arg.starts_with('-') {
            return Err(invalid(
                &format!("launch.slurm.extra_args[{i}]"),
                format!("`{arg}` is not an sbatch option; write it as `--name=value`"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn a_slurm_section_loads_and_bad_values_are_located() {
        let c = Config::from_yaml_str(
            "launch:\n  backend: slurm\n  slurm:\n    partition: gpu\n",
            "x.yaml",
        )
        .unwrap();
        assert_eq!(c.launch.backend, LaunchBackend::Slurm);
        assert_eq!(c.launch.slurm.partition.as_deref(), Some("gpu"));
        assert_eq!(c.launch.slurm.ntasks, 1);
        assert_eq!(Config::default().launch.backend, LaunchBackend::Local);
        assert!(!Config::default().to_yaml().contains("launch:"));
        let back = Config::from_yaml_str(&c.to_yaml(), "resolved.yaml").unwrap();
        assert_eq!(back.launch, c.launch);
        let err = Config::from_yaml_str("launch:\n  slurm:\n    ntasks: 0\n", "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("launch.slurm.ntasks") && err.contains("x.yaml:3"),
            "{err}"
        );
        let err = Config::from_yaml_str("launch:\n  backend: pbs\n", "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("backend") && err.contains("slurm"), "{err}");
        assert_eq!(c.launch.slurm.on_node_failure, NodeFailurePolicy::Requeue);
        let c = Config::from_yaml_str("launch:\n  slurm:\n    on_node_failure: wait\n", "x.yaml")
            .unwrap();
        assert_eq!(c.launch.slurm.on_node_failure, NodeFailurePolicy::Wait);
        let err =
            Config::from_yaml_str("launch:\n  slurm:\n    on_node_failure: retry\n", "x.yaml")
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("on_node_failure") && err.contains("requeue") && err.contains("x.yaml:3"),
            "{err}"
        );
        let err = Config::from_yaml_str("launch:\n  slurm:\n    time_limit: 2h\n", "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("launch.slurm.time_limit"), "{err}");
    }

    #[test]
    fn slurm_times() {
        for ok in [
            "1",
            "30",
            "4:00:00",
            "1-00:00:00",
            "2-12",
            "UNLIMITED",
            "0:30",
        ] {
            assert!(is_slurm_time(ok), "{ok}");
        }
        for bad in ["", "1h", "1:2:3:4", "-5", "a-1", "1.5"] {
            assert!(!is_slurm_time(bad), "{bad}");
        }
    }
}
