//! The nodes of a job: its allocation (`NodeList=n[1-2]`, expanded), which of them
//! Slurm holds lost (`scontrol show node`: DOWN, NOT_RESPONDING, FAIL), and the
//! sentence the status and the push say when one is.

use lavender::config::NodeFailurePolicy;

/// Expands a Slurm host list: `n[1-3,7]` → n1 n2 n3 n7, `gpu-[07-08],login` →
/// gpu-07 gpu-08 login (zero padding kept). Text it does not understand is kept
/// as one name rather than dropped.
pub fn expand_hostlist(list: &str) -> Vec<String> {
    let mut names = Vec::new();
    for item in split_top_level(list) {
        let Some((prefix, rest)) = item.split_once('[') else {
            if !item.is_empty() {
                names.push(item.to_string());
            }
            continue;
        };
        let Some((ranges, suffix)) = rest.split_once(']') else {
            names.push(item.to_string());
            continue;
        };
        let before = names.len();
        for range in ranges.split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            match (lo.parse::<u64>(), hi.parse::<u64>()) {
                (Ok(a), Ok(b)) if a <= b && b - a < 100_000 => {
                    for n in a..=b {
                        names.push(format!("{prefix}{n:0width$}{suffix}", width = lo.len()));
                    }
                }
                _ => {
                    names.truncate(before);
                    names.push(item.to_string());
                    break;
                }
            }
        }
    }
    names
}

/// Splits at the commas that are not inside brackets.
fn split_top_level(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(list[start..].trim());
    parts
}

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
            let name = super::query::field(line, "NodeName")?;
            let state = super::query::field(line, "State")?;
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
    fn host_lists_expand() {
        assert_eq!(expand_hostlist("n[1-2]"), ["n1", "n2"]);
        assert_eq!(expand_hostlist("n1"), ["n1"]);
        assert_eq!(
            expand_hostlist("gpu-[07-09,11],login"),
            ["gpu-07", "gpu-08", "gpu-09", "gpu-11", "login"]
        );
        assert_eq!(expand_hostlist("a,b"), ["a", "b"]);
        assert_eq!(expand_hostlist(""), Vec::<String>::new());
        assert_eq!(expand_hostlist("n[x-y]"), ["n[x-y]"], "kept, not dropped");
    }

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
