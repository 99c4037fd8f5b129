//! The feed itself: items numbered 1, 2, … kept in a bounded ring. Readers hold a
//! cursor (the last id they saw) and wake on a watch of the newest id, so a slow
//! reader never blocks a publisher and never loses its place while the ring still
//! holds it. Ids carry the daemon's boot time, so an id from an earlier daemon is
//! recognised as such rather than silently matched against new numbers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::Kind;

/// Items kept for replay. Heartbeats arrive at most every 50 ms (the status
/// cache's coalescing window), so this holds at least a minute and a half.
pub const DEFAULT_CAPACITY: usize = 2048;

#[derive(Debug, Clone, PartialEq)]
pub struct FeedItem {
    pub seq: u64,
    pub kind: Kind,
    /// JSON text.
    pub data: Arc<str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tip {
    last: u64,
    closed: bool,
}

struct Ring {
    items: VecDeque<Arc<FeedItem>>,
    next: u64,
}

#[derive(Clone)]
pub struct Feed {
    boot: u64,
    capacity: usize,
    ring: Arc<Mutex<Ring>>,
    tip: Arc<watch::Sender<Tip>>,
}

/// Where a reader starts, from its `Last-Event-ID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// A new reader (no id): what it needs is a snapshot, then live items.
    Fresh,
    /// The item after `seq` is still in the ring: replay exactly from there.
    After(u64),
    /// The id is from another daemon, or older than the ring: items were lost.
    Gap,
}

impl Feed {
    pub fn new(capacity: usize) -> Feed {
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Feed {
            boot,
            capacity: capacity.max(1),
            ring: Arc::new(Mutex::new(Ring {
                items: VecDeque::new(),
                next: 1,
            })),
            tip: Arc::new(watch::Sender::new(Tip {
                last: 0,
                closed: false,
            })),
        }
    }

    /// The SSE id of item `seq`: `<boot ms>-<seq>`.
    pub fn event_id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.boot)
    }

    /// Appends an item and wakes the readers; returns its sequence number.
    pub fn publish<T: serde::Serialize + ?Sized>(&self, kind: Kind, data: &T) -> u64 {
        let data: Arc<str> = serde_json::to_string(data)
            .unwrap_or_else(|_| "null".into())
            .into();
        let seq = {
            let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
            let seq = ring.next;
            ring.next += 1;
            ring.items.push_back(Arc::new(FeedItem { seq, kind, data }));
            while ring.items.len() > self.capacity {
                ring.items.pop_front();
            }
            seq
        };
        self.tip.send_modify(|t| t.last = t.last.max(seq));
        seq
    }

    /// Ends every stream (the daemon is shutting down).
    pub fn close(&self) {
        self.tip.send_modify(|t| t.closed = true);
    }

    #[cfg(test)]
    pub fn is_closed(&self) -> bool {
        self.tip.borrow().closed
    }

    /// The newest sequence number (0 before the first item).
    pub fn last_seq(&self) -> u64 {
        self.tip.borrow().last
    }

    /// Where a reader with this `Last-Event-ID` resumes.
    pub fn replay_from(&self, last_event_id: Option<&str>) -> Replay {
        let Some(id) = last_event_id.map(str::trim).filter(|s| !s.is_empty()) else {
            return Replay::Fresh;
        };
        let parsed = id
            .split_once('-')
            .and_then(|(b, s)| Some((b.parse::<u64>().ok()?, s.parse::<u64>().ok()?)));
        match parsed {
            Some((boot, seq)) if boot == self.boot && seq <= self.last_seq() => {
                let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
                let oldest = ring.items.front().map_or(ring.next, |i| i.seq);
                if seq + 1 >= oldest {
                    Replay::After(seq)
                } else {
                    Replay::Gap
                }
            }
            _ => Replay::Gap,
        }
    }

    /// Items after `seq`, oldest first; `None` when the ring no longer reaches
    /// back that far (the reader fell behind by more than the capacity).
    pub fn after(&self, seq: u64) -> Option<Vec<Arc<FeedItem>>> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = ring.items.front().map_or(ring.next, |i| i.seq);
        if seq + 1 < oldest {
            return None;
        }
        let skip = (seq + 1 - oldest) as usize;
        Some(ring.items.iter().skip(skip).cloned().collect())
    }

    /// Everything the ring holds, oldest first.
    pub fn items(&self) -> Vec<Arc<FeedItem>> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.items.iter().cloned().collect()
    }

    /// Wakes when an item is published or the feed closes.
    pub fn watch(&self) -> FeedWatch {
        FeedWatch {
            rx: self.tip.subscribe(),
        }
    }
}

pub struct FeedWatch {
    rx: watch::Receiver<Tip>,
}

impl FeedWatch {
    /// Waits until the newest id passes `seen`; false once the feed is closed.
    pub async fn wait_past(&mut self, seen: u64) -> bool {
        self.rx
            .wait_for(|t| t.closed || t.last > seen)
            .await
            .map(|t| !t.closed)
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn items_are_numbered_and_the_ring_is_bounded() {
        let feed = Feed::new(3);
        for i in 0..5 {
            feed.publish(Kind::Milestone, &json!({ "i": i }));
        }
        assert_eq!(feed.last_seq(), 5);
        // 1 and 2 fell out of the ring.
        assert!(feed.after(0).is_none());
        assert!(feed.after(1).is_none());
        let tail: Vec<u64> = feed.after(2).unwrap().iter().map(|i| i.seq).collect();
        assert_eq!(tail, vec![3, 4, 5]);
        assert!(feed.after(5).unwrap().is_empty());
    }

    #[test]
    fn last_event_id_resolves_to_replay_or_gap() {
        let feed = Feed::new(3);
        for _ in 0..5 {
            feed.publish(Kind::Heartbeat, &json!({}));
        }
        assert_eq!(feed.replay_from(None), Replay::Fresh);
        assert_eq!(feed.replay_from(Some("")), Replay::Fresh);
        assert_eq!(feed.replay_from(Some(&feed.event_id(3))), Replay::After(3));
        // Item 2 is the oldest a reader may have seen and still resume exactly.
        assert_eq!(feed.replay_from(Some(&feed.event_id(2))), Replay::After(2));
        assert_eq!(feed.replay_from(Some(&feed.event_id(1))), Replay::Gap);
        // An id from another daemon, or one from the future, or garbage.
        assert_eq!(feed.replay_from(Some("12-3")), Replay::Gap);
        assert_eq!(feed.replay_from(Some(&feed.event_id(99))), Replay::Gap);
        assert_eq!(feed.replay_from(Some("nonsense")), Replay::Gap);
    }

    #[tokio::test]
    async fn a_watch_wakes_on_publish_and_reports_close() {
        let feed = Feed::new(8);
        let mut w = feed.watch();
        let f = feed.clone();
        tokio::spawn(async move { f.publish(Kind::Alert, &json!({})) });
        assert!(w.wait_past(0).await);
        let f = feed.clone();
        tokio::spawn(async move { f.close() });
        assert!(!w.wait_past(1).await);
        assert!(feed.is_closed());
    }
}
