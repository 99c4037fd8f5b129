//! The Server-Sent Events stream of `GET /events`. Every feed item goes out with
//! its id (`<boot>-<seq>`), so a browser's EventSource, reconnecting on its own,
//! sends `Last-Event-ID` and gets exactly what it missed. A new reader first gets
//! the recent milestones and alerts and one `status` snapshot (without an id: it
//! is not part of the sequence). When the ring no longer holds what a reader
//! missed, it gets a `reset` event and starts over like a new reader. When the
//! daemon shuts down, every stream ends with a `shutdown` event.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::Event;
use futures_util::Stream;
use serde_json::json;

use super::WebState;
use crate::feed::bus::FeedWatch;
use crate::feed::{FeedItem, Kind, Replay};

/// How long a disconnected EventSource waits before reconnecting.
pub const RETRY: Duration = Duration::from_millis(1000);
/// Milestones and alerts a new reader gets before the live items.
pub const BACKLOG: usize = 100;

struct Reader {
    web: WebState,
    watch: FeedWatch,
    cursor: u64,
    pending: VecDeque<Event>,
    closing: bool,
    done: bool,
}

pub fn stream(web: WebState, replay: Replay) -> impl Stream<Item = Result<Event, Infallible>> {
    let watch = web.feed.watch();
    let mut reader = Reader {
        web,
        watch,
        cursor: 0,
        pending: VecDeque::new(),
        closing: false,
        done: false,
    };
    reader
        .pending
        .push_back(Event::default().retry(RETRY).comment("lavenderd events"));
    match replay {
        Replay::After(seq) => reader.cursor = seq,
        Replay::Fresh => reader.start_fresh(),
        Replay::Gap => {
            reader.pending.push_back(reset());
            reader.start_fresh();
        }
    }
    futures_util::stream::unfold(
        reader,
        |mut r| async move { r.next().await.map(|e| (Ok(e), r)) },
    )
}

fn reset() -> Event {
    Event::default().event("reset").data(
        json!({"message": "events were missed (the daemon restarted, or the reader fell too far behind); starting over"})
            .to_string(),
    )
}

impl Reader {
    /// The recent milestones and alerts, then a status snapshot; live from here.
    fn start_fresh(&mut self) {
        let feed = &self.web.feed;
        self.cursor = feed.last_seq();
        let recent: Vec<_> = feed
            .items()
            .into_iter()
            .filter(|i| i.seq <= self.cursor && matches!(i.kind, Kind::Milestone | Kind::Alert))
            .collect();
        let skip = recent.len().saturating_sub(BACKLOG);
        for item in &recent[skip..] {
            self.pending.push_back(self.event(item));
        }
        let snapshot =
            serde_json::to_string(&self.web.snapshot()).unwrap_or_else(|_| "null".into());
        self.pending
            .push_back(Event::default().event("status").data(snapshot));
    }

    fn event(&self, item: &FeedItem) -> Event {
        Event::default()
            .id(self.web.feed.event_id(item.seq))
            .event(item.kind.as_str())
            .data(&*item.data)
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.done {
                return None;
            }
            match self.web.feed.after(self.cursor) {
                Some(items) if !items.is_empty() => {
                    for item in &items {
                        self.pending.push_back(self.event(item));
                    }
                    self.cursor = items[items.len() - 1].seq;
                }
                None => {
                    // Fell behind by more than the ring holds.
                    self.pending.push_back(reset());
                    self.start_fresh();
                }
                Some(_) if self.closing => {
                    self.pending.push_back(
                        Event::default()
                            .event("shutdown")
                            .data(json!({"message": "lavenderd is shutting down"}).to_string()),
                    );
                    self.done = true;
                }
                Some(_) => {
                    if !self.watch.wait_past(self.cursor).await {
                        // Closed: send what is left, then end.
                        self.closing = true;
                    }
                }
            }
        }
    }
}
