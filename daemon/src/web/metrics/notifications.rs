//! The hook for notification counts: whatever sends notifications implements
//! [`NotificationCounts`] and is handed to the web state; until then the
//! `lavender_notifications_total` family is declared with no samples.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationCount {
    /// e.g. `ntfy`, `webhook`, `email`.
    pub channel: String,
    /// e.g. `sent`, `failed`, `suppressed`.
    pub outcome: String,
    pub count: u64,
}

pub trait NotificationCounts: Send + Sync {
    fn notification_counts(&self) -> Vec<NotificationCount>;
}
