//! What Slurm says about a job. `scontrol show job` knows it while the controller
//! holds it (running, pending, and `MinJobAge` seconds after it ended); after that
//! only `sacct` does, and only where accounting (slurmdbd) is set up. Without
//! either the exit status is unknown and the heartbeat decides (see pipeline/judge).

use super::text::field;
use crate::exit::ExitOutcome;

/// One look at a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobInfo {
    /// Not ended: pending, running, completing, requeued, suspended…; `reason` is
    /// Slurm's why (`BeginTime`, `Resources`, …) when it gives one.
    Active {
        state: String,
        node: Option<String>,
        reason: Option<String>,
        /// The allocation's nodes (empty while pending).
        nodes: Vec<String>,
        /// How many nodes the job runs on (`NumNodes`), asked for while pending.
        num_nodes: Option<u32>,
    },
    /// Ended, with how.
    Ended {
        state: String,
        node: Option<String>,
        outcome: ExitOutcome,
        nodes: Vec<String>,
    },
    /// Neither the controller nor accounting knows the job.
    Unknown,
}

/// States after which a job will not run again by itself.
const ENDED: &[&str] = &[
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
];

fn is_ended(state: &str) -> bool {
    ENDED.contains(&state)
}

/// `ExitCode=<code>:<signal>` as Slurm reports it.
fn outcome_of(exit_code: &str) -> ExitOutcome {
    let (code, signal) = exit_code.split_once(':').unwrap_or((exit_code, "0"));
    match (code.parse::<i32>(), signal.parse::<i32>()) {
        (_, Ok(sig)) if sig != 0 => ExitOutcome::Signal(sig),
        (Ok(code), _) => ExitOutcome::Code(code),
        _ => ExitOutcome::Unknown,
    }
}

/// Parses `scontrol -o show job <id>`.
pub fn parse_scontrol(text: &str) -> Option<JobInfo> {
    let line = text.lines().find(|l| l.contains("JobState="))?;
    let state = field(line, "JobState")?.to_string();
    let node = field(line, "BatchHost")
        .or_else(|| field(line, "NodeList"))
        .filter(|n| !n.is_empty() && *n != "(null)")
        .map(str::to_string);
    let outcome = field(line, "ExitCode").map_or(ExitOutcome::Unknown, outcome_of);
    let reason = field(line, "Reason")
        .filter(|r| !r.is_empty() && *r != "None" && *r != "(null)")
        .map(str::to_string);
    let nodes = field(line, "NodeList")
        .filter(|n| *n != "(null)")
        .map(super::text::expand_hostlist)
        .unwrap_or_default();
    // "2" or, while pending, "2-2".
    let num_nodes = field(line, "NumNodes")
        .and_then(|n| n.split('-').next())
        .and_then(|n| n.parse().ok());
    Some(job_info(
        state,
        node,
        outcome,
        reason,
        batch_first(nodes, node_ref(line)),
        num_nodes,
    ))
}

fn node_ref(line: &str) -> Option<&str> {
    field(line, "BatchHost").filter(|n| !n.is_empty() && *n != "(null)")
}

/// The batch node first (it runs the script and rank 0), the others in Slurm's order.
fn batch_first(mut nodes: Vec<String>, batch: Option<&str>) -> Vec<String> {
    if let Some(i) = batch.and_then(|b| nodes.iter().position(|n| n == b)) {
        let first = nodes.remove(i);
        nodes.insert(0, first);
    }
    nodes
}

/// Parses `sacct -n -X -P -o State,ExitCode,NodeList -j <id>`.
pub fn parse_sacct(text: &str) -> Option<JobInfo> {
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    let mut parts = line.split('|');
    // "CANCELLED by 0" → "CANCELLED".
    let state = parts.next()?.split_whitespace().next()?.to_string();
    let outcome = parts.next().map_or(ExitOutcome::Unknown, outcome_of);
    let node_list = parts
        .next()
        .map(str::trim)
        .filter(|n| !n.is_empty() && *n != "None assigned");
    let nodes = node_list
        .map(super::text::expand_hostlist)
        .unwrap_or_default();
    let node = nodes.first().cloned();
    Some(job_info(state, node, outcome, None, nodes, None))
}

/// An ended job carries its outcome; an active one only its state and node.
fn job_info(
    state: String,
    node: Option<String>,
    outcome: ExitOutcome,
    reason: Option<String>,
    nodes: Vec<String>,
    num_nodes: Option<u32>,
) -> JobInfo {
    if is_ended(&state) {
        JobInfo::Ended {
            state,
            node,
            outcome,
            nodes,
        }
    } else {
        JobInfo::Active {
            state,
            node,
            reason,
            nodes,
            num_nodes,
        }
    }
}

/// Asks the controller, then accounting.
pub fn look(job_id: &str) -> JobInfo {
    let scontrol = super::run(
        "scontrol",
        &["-o".into(), "show".into(), "job".into(), job_id.into()],
    );
    match scontrol {
        Ok(text) => {
            if let Some(info) = parse_scontrol(&text) {
                return info;
            }
        }
        Err(e) => {
            let text = e.to_string();
            if !text.contains("Invalid job id") {
                // The controller did not answer: say nothing rather than "ended".
                tracing::warn!("{e:#}");
                return JobInfo::Active {
                    state: "UNREACHABLE".into(),
                    node: None,
                    reason: None,
                    nodes: Vec::new(),
                    num_nodes: None,
                };
            }
        }
    }
    // Without slurmdbd sacct fails ("accounting storage is disabled"): unknown.
    super::run(
        "sacct",
        &[
            "-n".into(),
            "-X".into(),
            "-P".into(),
            "-o".into(),
            "State,ExitCode,NodeList".into(),
            "-j".into(),
            job_id.into(),
        ],
    )
    .ok()
    .and_then(|text| parse_sacct(&text))
    .unwrap_or(JobInfo::Unknown)
}

/// True while the job has not ended (an unreachable controller counts as alive).
pub fn job_alive(job_id: &str) -> bool {
    matches!(look(job_id), JobInfo::Active { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scontrol_states_and_exit_codes() {
        let running = "JobId=7 JobName=lavender-train UserId=root(0) JobState=RUNNING Reason=None Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0 NodeList=vm BatchHost=vm NumNodes=1";
        assert_eq!(
            parse_scontrol(running),
            Some(JobInfo::Active {
                state: "RUNNING".into(),
                node: Some("vm".into()),
                reason: None,
                nodes: vec!["vm".into()],
                num_nodes: Some(1),
            })
        );
        let pending =
            "JobId=7 JobState=PENDING Reason=BeginTime ExitCode=0:0 NodeList=(null) NumNodes=2-2";
        assert_eq!(
            parse_scontrol(pending),
            Some(JobInfo::Active {
                state: "PENDING".into(),
                node: None,
                reason: Some("BeginTime".into()),
                nodes: vec![],
                num_nodes: Some(2),
            })
        );
        // Two nodes: the batch node first, whatever Slurm's order.
        let two = "JobId=8 JobState=RUNNING Reason=None ExitCode=0:0 NodeList=n[1-2] BatchHost=n2 NumNodes=2 NumCPUs=2";
        assert!(matches!(
            parse_scontrol(two),
            Some(JobInfo::Active { nodes, node: Some(batch), num_nodes: Some(2), .. })
                if nodes == ["n2", "n1"] && batch == "n2"
        ));
        let failed = "JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 NodeList=vm";
        assert!(matches!(
            parse_scontrol(failed),
            Some(JobInfo::Ended {
                outcome: ExitOutcome::Code(3),
                ..
            })
        ));
        let cancelled = "JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15 NodeList=vm";
        assert!(matches!(
            parse_scontrol(cancelled),
            Some(JobInfo::Ended {
                outcome: ExitOutcome::Signal(15),
                ..
            })
        ));
        assert_eq!(
            parse_scontrol("slurm_load_jobs error: Invalid job id specified"),
            None
        );
    }

    #[test]
    fn sacct_lines() {
        assert!(matches!(
            parse_sacct("CANCELLED by 0|0:15|vm\n"),
            Some(JobInfo::Ended {
                outcome: ExitOutcome::Signal(15),
                ..
            })
        ));
        assert!(matches!(
            parse_sacct("COMPLETED|0:0|vm\n"),
            Some(JobInfo::Ended {
                outcome: ExitOutcome::Code(0),
                ..
            })
        ));
        assert_eq!(parse_sacct(""), None);
    }
}
