//! The nodes of a job: its allocation (`NodeList=n[1-2]`, expanded), which of them
//! Slurm holds lost (`scontrol show node`: DOWN, NOT_RESPONDING, FAIL), and the
//! sentence the status and the push say when one is.

use lavender::config::NodeFailurePolicy;

/// A node state (`scontrol`'s `State=`, e.g. `DOWN+NOT_RESPONDING`, `IDLE+DRAIN`)
/// in which its jobs cannot run: the node died or stopped answering. A drained
/// node is an operator's choice, not a loss.
pub fn is_lost(state: &str) -> bool {
    state
        .split('+')
        .any(|s| matches!(s.trim_end_matches('*'), "DOWN" | "NOT_RESPONDING" | "FAIL"))
}

/// The lost nodes among `scontrol -o show node <list>`'s lines.
pub fn parse_lost(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let name = super::text::field(line, "NodeName")?;
            let state = super::text::field(line, "State")?;
            is_lost(state).then(|| name.to_string())
        })
        .collect()
}

/// Which of `nodes` Slurm holds lost now (none when it cannot be asked).
pub fn lost_now(nodes: &[String]) -> Vec<String> {
    if nodes.is_empty() {
        return Vec::new();
    }
    let args = [
        "-o".to_string(),
        "show".into(),
        "node".into(),
        nodes.join(","),
    ];
    match super::run("scontrol", &args) {
        Ok(text) => parse_lost(&text),
        Err(e) => {
            tracing::warn!("{e:#}");
            Vec::new()
        }
    }
}

/// "node n2 lost at step 120; waiting for 2 nodes", as the status and the push say
/// it; `step` is the last one rank 0 reported, `wanted` the job's node count.
pub fn loss_message(
    lost: &[String],
    step: Option<u64>,
    wanted: u32,
    policy: NodeFailurePolicy,
) -> String {
    let who = match lost {
        [one] => format!("node {one}"),
        many => format!("nodes {}", many.join(", ")),
    };
    let at = step.map_or(String::new(), |s| format!(" at step {s}"));
    let nodes = if wanted == 1 { "node" } else { "nodes" };
    let next = match policy {
        NodeFailurePolicy::Requeue => format!("waiting for {wanted} {nodes}"),
        NodeFailurePolicy::Wait => {
            format!("waiting for {wanted} {nodes}, {} among them", lost.join(", "))
        }
        NodeFailurePolicy::Fail => {
            "the job is cancelled (launch.slurm.on_node_failure: fail); `lavenderd start --resume latest` continues".to_string()
        }
    };
    format!("{who} lost{at}; {next}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_nodes_are_down_or_silent_not_drained() {
        assert!(is_lost("DOWN+NOT_RESPONDING"));
        assert!(is_lost("MIXED+NOT_RESPONDING"));
        assert!(is_lost("DOWN*"));
        assert!(!is_lost("IDLE+DRAIN"));
        assert!(!is_lost("ALLOCATED"));
        let text = "NodeName=n1 Arch=x86_64 CoresPerSocket=1 State=IDLE ThreadsPerCore=1\n\
                    NodeName=n2 Arch=x86_64 CoresPerSocket=1 State=DOWN+NOT_RESPONDING ThreadsPerCore=1 Reason=Not responding [slurm@2026-12-02T12:45:07]\n";
        assert_eq!(parse_lost(text), ["n2"]);
    }

    #[test]
    fn the_loss_is_said_with_the_step_and_what_follows() {
        let n2 = ["n2".to_string()];
        assert_eq!(
            loss_message(&n2, Some(120), 2, NodeFailurePolicy::Requeue),
            "node n2 lost at step 120; waiting for 2 nodes"
        );
        assert_eq!(
            loss_message(&n2, None, 2, NodeFailurePolicy::Wait),
            "node n2 lost; waiting for 2 nodes, n2 among them"
        );
        assert!(
            loss_message(&n2, Some(3), 2, NodeFailurePolicy::Fail)
                .starts_with("node n2 lost at step 3; the job is cancelled")
        );
    }
}
