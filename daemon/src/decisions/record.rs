//! The lines of `state/decisions.jsonl`: a [`Decision`] when the daemon acts on its
//! own (or, in observe mode, would have), and later an [`Outcome`] naming it by id.
//! Outcomes are appended, never written into the decision's line: the file only
//! grows, so it rotates like the logs and a crash mid-write loses at most one line.

use lavender::config::PipelineStep;
use lavender::failure::Failure;
use serde::{Deserialize, Serialize};

/// One line of the decision log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Line {
    Decision(Box<Decision>),
    Outcome(Outcome),
}

/// What the daemon decided by itself, on what evidence, by which rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Unique in the data root: `<UTC time>-<pid>-<n>`.
    pub id: String,
    /// RFC 3339, UTC.
    pub at: String,
    pub kind: DecisionKind,
    pub step: PipelineStep,
    /// Done, or (`supervisor.mode: observe`) only said.
    pub mode: Mode,
    pub saw: Evidence,
    pub rule: Rule,
    /// What it did (or would have done), for a person.
    pub did: String,
    /// The evidence bundle taken before acting (a hang's stacks), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
}

/// The actions the daemon takes without being asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// A failed or hung worker restarted from the latest complete checkpoint.
    Restart,
    /// A worker without heartbeats killed (SIGTERM, then SIGKILL).
    HangKill,
    /// A divergence rolled back to the checkpoint before it.
    Rollback,
    /// The pipeline failed: restarting would not help, or the limits are reached.
    GiveUp,
    /// Checkpoints deleted before their time (the disk running full).
    EarlyRetention,
    /// A save found the disk full: the pipeline waits for space (not a restart).
    WaitForDisk,
    /// Space came back after a [`DecisionKind::WaitForDisk`]: the worker resumed.
    DiskResume,
    /// A damaged checkpoint set aside and an older one used instead.
    CheckpointSetAside,
    /// A Slurm job put back in the queue.
    Requeue,
    /// A node of a Slurm job declared lost.
    NodeLost,
    /// A resumed worker's replayed step differs from what it gave the first time
    /// (`lavender::replay`): alerted, or the pipeline stopped.
    ResumeMismatch,
}

impl DecisionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Restart => "restart",
            DecisionKind::HangKill => "hang kill",
            DecisionKind::Rollback => "rollback",
            DecisionKind::GiveUp => "give up",
            DecisionKind::EarlyRetention => "early retention",
            DecisionKind::WaitForDisk => "wait for disk",
            DecisionKind::DiskResume => "resume after disk",
            DecisionKind::CheckpointSetAside => "checkpoint set aside",
            DecisionKind::Requeue => "requeue",
            DecisionKind::NodeLost => "node lost",
            DecisionKind::ResumeMismatch => "resume mismatch",
        }
    }
}

/// `supervisor.mode`: whether the decision was carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Acted,
    /// Observe mode: logged as "would have", nothing done.
    WouldHave,
}

/// What the daemon saw when it decided. Every field is optional: a hang has no
/// exit status yet, a crash no heartbeat age past its last beat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Seconds since the worker's last heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_age_s: Option<f64>,
    /// The phase the last heartbeat named (training, saving, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The training step last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_step: Option<u64>,
    /// How the worker ended ("exit code 3", "killed by SIGKILL (signal 9)").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<String>,
    /// The failure the worker reported (or its exit was judged as).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Restarts in a row before this decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<u32>,
    /// Restarts in a row that did not train past the step they resumed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_progress_restarts: Option<u32>,
    /// Workers in a row that ended with this same failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_failure: Option<u32>,
    /// Rollbacks so far in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollbacks: Option<usize>,
    /// The worker it was about (pid, process group or Slurm job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Anything else, in words (a Slurm message, a checkpoint's damage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The rule that fired: a config key and its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub key: String,
    pub value: serde_json::Value,
}

impl Rule {
    pub fn new(key: impl Into<String>, value: impl Serialize) -> Rule {
        Rule {
            key: key.into(),
            value: serde_json::to_value(value).unwrap_or(serde_json::Value::Null),
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            serde_json::Value::String(s) => write!(f, "{}: {s}", self.key),
            v => write!(f, "{}: {v}", self.key),
        }
    }
}

/// How a decision turned out, appended once known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The decision's id.
    pub of: String,
    pub at: String,
    pub result: OutcomeKind,
    /// For a person: "training past step 1240 at 03:12".
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// The worker brought back trained past where it resumed (or its step finished).
    Recovered,
    /// The worker brought back failed or hung again (another decision follows).
    FailedAgain,
    /// The pipeline failed and waits for an operator.
    GaveUp,
    /// Stopped by an operator (or the daemon's exit) before it was known.
    Stopped,
    /// Observe mode: nothing was done.
    NotActed,
}

impl OutcomeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Recovered => "recovered",
            OutcomeKind::FailedAgain => "failed again",
            OutcomeKind::GaveUp => "gave up",
            OutcomeKind::Stopped => "stopped",
            OutcomeKind::NotActed => "not acted (observe mode)",
        }
    }
}
