//! Notification counts for `lavender_notifications_total{channel,outcome}`, read from
//! the notifier the web state holds.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationCount {
    /// e.g. `ntfy`, `webhook`, `email`.
    pub channel: String,
    /// e.g. `sent`, `failed`, `suppressed`.
    pub outcome: String,
    pub count: u64,
}

/// One count per channel and outcome.
pub fn notification_counts(notifier: &crate::push::Notifier) -> Vec<NotificationCount> {
    notifier
        .counts()
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
