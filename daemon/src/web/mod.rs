//! What the daemon shows people and monitoring: the dashboard page (`GET /`),
//! the curves (`/runs/{id}/history`), Prometheus metrics (`/metrics`), and the
//! live feed behind Server-Sent Events (`/events`).

pub mod events;
pub mod history;
pub mod metrics;
pub mod page;

use std::sync::Arc;

use crate::feed::publisher::{self, Counters};
use crate::feed::{Feed, Snapshot};
use crate::pipeline::PipelineHandle;
use crate::status::StatusCache;
use history::HistoryCache;
use lavender::layout::Layout;

/// The web side's share of the server state.
#[derive(Clone)]
pub struct WebState {
    pub feed: Feed,
    pub history: Arc<HistoryCache>,
    pub counters: Arc<Counters>,
    /// Set once notifications exist; `/metrics` then reports their counts.
    pub notifications: Option<crate::push::Notifier>,
    /// What the checkpoints room did; `/metrics` reports it.
    pub checkpoints: Option<tokio::sync::watch::Receiver<crate::checkpoints::lifecycle::Report>>,
    cache: StatusCache,
}

impl WebState {
    /// Starts the task that fills `feed` from the status cache, the pipeline and
    /// the run's events (read by `follower`, which also pushes milestones).
    pub fn start(
        feed: Feed,
        cache: StatusCache,
        pipeline: PipelineHandle,
        layout: Layout,
        follower: crate::events::EventFollower,
        goodput: crate::goodput::Goodput,
    ) -> WebState {
        let counters = publisher::spawn(
            feed.clone(),
            cache.clone(),
            pipeline,
            layout,
            follower,
            goodput,
        );
        WebState {
            feed,
            history: Arc::new(HistoryCache::default()),
            counters,
            notifications: None,
            checkpoints: None,
            cache,
        }
    }

    pub fn with_notifications(mut self, notifier: crate::push::Notifier) -> WebState {
        self.notifications = Some(notifier);
        self
    }

    pub fn with_checkpoints(
        mut self,
        report: tokio::sync::watch::Receiver<crate::checkpoints::lifecycle::Report>,
    ) -> WebState {
        self.checkpoints = Some(report);
        self
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot::take(&self.cache, &self.cache.snapshot().record)
    }
}
