//! Notification counts for `lavender_notifications_total{channel,outcome}`: the
//! notifier implements [`NotificationCounts`] and is handed to the web state.

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

impl NotificationCounts for crate::notify::Notifier {
    fn notification_counts(&self) -> Vec<NotificationCount> {
        self.counts()
            .into_iter()
            .flat_map(|(channel, c)| {
                [
                    ("sent", c.sent),
                    ("failed", c.failed),
                    ("dropped", c.dropped),
                ]
                .map(|(outcome, count)| NotificationCount {
                    channel: channel.clone(),
                    outcome: outcome.to_string(),
                    count,
                })
            })
            .collect()
    }
}
