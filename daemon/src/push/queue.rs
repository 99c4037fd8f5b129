//! One lane per channel: a bounded queue (alerts first), its counts, and the task
//! that drains it with rate limiting, per-attempt timeouts and retries.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lavender::config::NotifyConfig;
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::channel::Channel;
use super::message::{Level, Notification};
use super::rate::RateLimit;
use crate::backoff::Backoff;

/// Pushes per channel since the daemon started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ChannelCounts {
    /// Delivered: the server accepted them.
    pub sent: u64,
    /// Given up on after the last attempt (or refused by the server).
    pub failed: u64,
    /// Never attempted: coalesced repeats of an alert, or pushed out of a full queue.
    pub dropped: u64,
}

/// The delivery timings; injectable so tests run in milliseconds. A type of its own,
/// not the `notify:` section: the section says whole seconds, and the rate window
/// has no key (it is the minute of `max_per_minute`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timings {
    /// Bound on one delivery attempt.
    pub attempt_timeout: Duration,
    /// The wait before retry N.
    pub retry_backoff: Backoff,
    /// The rate limit's window (`max_per_minute` pushes per window).
    pub rate_window: Duration,
    /// A repeat of the previous alert's kind within this is dropped.
    pub coalesce_window: Duration,
}

impl Timings {
    pub fn from_config(cfg: &NotifyConfig) -> Timings {
        Timings {
            attempt_timeout: Duration::from_secs(cfg.timeout_s),
            retry_backoff: Backoff::new(
                cfg.retry_backoff_s
                    .iter()
                    .map(|&s| Duration::from_secs(s))
                    .collect(),
            ),
            rate_window: Duration::from_secs(60),
            coalesce_window: Duration::from_secs(cfg.coalesce_s),
        }
    }
}

/// Pushes waiting per channel; beyond it the oldest milestone is dropped.
pub(super) const CAPACITY: usize = 100;

pub(super) struct Lane {
    pub name: String,
    pub channel: Channel,
    state: Mutex<LaneState>,
    wake: Notify,
    /// Told after every change of the counts (the status shows them).
    counted: Arc<watch::Sender<()>>,
}

#[derive(Default)]
struct LaneState {
    queue: VecDeque<Notification>,
    counts: ChannelCounts,
    closed: bool,
}

/// What a delivery task needs besides its lane.
#[derive(Clone)]
pub(super) struct Policy {
    pub attempts: u32,
    pub max_per_window: u32,
    pub timings: Timings,
}

impl Lane {
    pub fn new(name: String, channel: Channel, counted: Arc<watch::Sender<()>>) -> Arc<Lane> {
        Arc::new(Lane {
            name,
            channel,
            state: Mutex::new(LaneState::default()),
            wake: Notify::new(),
            counted,
        })
    }

    /// Changes the counts and tells the subscribers.
    fn count(&self, change: impl FnOnce(&mut ChannelCounts)) {
        change(&mut self.state().counts);
        self.counted.send_replace(());
    }

    fn state(&self) -> MutexGuard<'_, LaneState> {
        // The state stays consistent at every await-free step; a panic elsewhere
        // must not stop notifications.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `n`; never blocks beyond a short lock.
    pub fn push(&self, n: Notification) {
        let mut st = self.state();
        if st.queue.len() >= CAPACITY {
            st.counts.dropped += 1;
            self.counted.send_replace(());
            // Make room by dropping the oldest milestone; a queue of alerts only
            // drops a new milestone, or else its oldest alert.
            let oldest_milestone = st.queue.iter().position(|q| q.level == Level::Milestone);
            let dropped = match (oldest_milestone, n.level) {
                (Some(i), _) => st.queue.remove(i).map(|d| d.kind),
                (None, Level::Milestone) => Some(n.kind.clone()),
                (None, Level::Alert) => st.queue.pop_front().map(|d| d.kind),
            };
            tracing::warn!(
                channel = %self.name,
                "notify: {}: queue full ({CAPACITY}); dropped a `{}` push",
                self.name,
                dropped.unwrap_or_default()
            );
            if oldest_milestone.is_none() && n.level == Level::Milestone {
                return;
            }
        }
        st.queue.push_back(n);
        drop(st);
        self.wake.notify_one();
    }

    pub fn count_dropped(&self) {
        self.count(|c| c.dropped += 1);
    }

    pub fn counts(&self) -> ChannelCounts {
        self.state().counts
    }

    /// No more pushes will come; the task exits once the queue is empty.
    pub fn close(&self) {
        self.state().closed = true;
        self.wake.notify_one();
    }

    /// The next push: the oldest alert, else the oldest milestone.
    fn pop(&self) -> Option<Notification> {
        let mut st = self.state();
        let i = st
            .queue
            .iter()
            .position(|q| q.level == Level::Alert)
            .unwrap_or(0);
        st.queue.remove(i)
    }

    /// Waits until something is queued; `false` when closed and empty.
    async fn ready(&self) -> bool {
        loop {
            {
                let st = self.state();
                if !st.queue.is_empty() {
                    return true;
                }
                if st.closed {
                    return false;
                }
            }
            self.wake.notified().await;
        }
    }
}

/// The delivery task of one lane.
pub(super) async fn run(lane: Arc<Lane>, http: Option<reqwest::Client>, policy: Policy) {
    let mut rate = RateLimit::new(policy.max_per_window, policy.timings.rate_window);
    while lane.ready().await {
        while let Some(wait) = rate.wait(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        // Popped after the rate wait, so an alert that arrived meanwhile goes first.
        let Some(n) = lane.pop() else { continue };
        rate.record(Instant::now());
        deliver(&lane, http.as_ref(), &policy, &n).await;
    }
}

async fn deliver(lane: &Lane, http: Option<&reqwest::Client>, policy: &Policy, n: &Notification) {
    let timings = &policy.timings;
    let attempts = policy.attempts.max(1);
    for attempt in 1..=attempts {
        match lane.channel.deliver(http, n, timings.attempt_timeout).await {
            Ok(answer) => {
                tracing::debug!(channel = %lane.name, kind = %n.kind, "notify: {}: sent: {answer}", lane.name);
                lane.count(|c| c.sent += 1);
                return;
            }
            Err(e) if e.retryable && attempt < attempts => {
                tracing::debug!(channel = %lane.name, "notify: {}: attempt {attempt} failed: {e}", lane.name);
                tokio::time::sleep(timings.retry_backoff.before(attempt)).await;
            }
            Err(e) => {
                tracing::warn!(
                    channel = %lane.name,
                    "notify: {}: dropped `{}` push after {attempt} attempt{}: {e}",
                    lane.name,
                    n.kind,
                    if attempt == 1 { "" } else { "s" }
                );
                lane.count(|c| c.failed += 1);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::config::WebhookFormat;

    use super::super::webhook::Webhook;

    #[test]
    fn a_full_queue_drops_its_oldest_milestone_and_keeps_alerts() {
        let lane = Lane::new(
            "hook".into(),
            Channel::Webhook(Webhook::new("http://127.0.0.1:9", WebhookFormat::Json)),
            Arc::new(watch::channel(()).0),
        );
        let counted = lane.counted.subscribe();
        lane.push(Notification::milestone("m", "first"));
        for i in 1..CAPACITY {
            lane.push(Notification::alert("a", format!("alert {i}"), ""));
        }
        lane.push(Notification::alert("crashed", "newest", ""));
        assert_eq!(lane.counts().dropped, 1);
        assert!(counted.has_changed().unwrap(), "a drop is told");
        // The milestone made room; alerts leave oldest first.
        assert_eq!(lane.pop().unwrap().title, "alert 1");
        // Full of alerts: a new milestone is what goes.
        lane.push(Notification::alert("a", "refill", ""));
        lane.push(Notification::milestone("m", "late"));
        assert_eq!(lane.counts().dropped, 2);
        let mut rest = Vec::new();
        while let Some(n) = lane.pop() {
            rest.push(n);
        }
        assert_eq!(rest.len(), CAPACITY);
        assert!(rest.iter().all(|n| n.level == Level::Alert));
        assert_eq!(rest.last().unwrap().title, "refill");
    }
}
