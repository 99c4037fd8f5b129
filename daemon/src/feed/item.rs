//! What the feed carries.

/// The kinds of feed items; the SSE `event:` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The pipeline state, active step, restarts or step states changed.
    State,
    /// The worker's heartbeat (or what the status shows of it) changed: a full [`super::Snapshot`].
    Heartbeat,
    /// One `events.jsonl` line of the run.
    Milestone,
    /// Something an operator must hear about (crash, failure, stale heartbeat, …).
    Alert,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::State => "state",
            Kind::Heartbeat => "heartbeat",
            Kind::Milestone => "milestone",
            Kind::Alert => "alert",
        }
    }
}
