use std::cell::RefCell;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};

use crate::status::{StatusCache, StatusSnapshot};

/// `GET /status`: the contract, from the cache (ages computed now), plus the
/// notification counts per channel.
pub async fn get(State(cache): State<StatusCache>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        body(&cache, lavender::time::now_utc()),
    )
}

/// The last body this thread rendered: the snapshot it came from and the
/// millisecond of its timestamp.
struct Rendered {
    snapshot: Arc<StatusSnapshot>,
    millis: i64,
    body: Bytes,
}

thread_local! {
    static RENDERED: RefCell<Option<Rendered>> = const { RefCell::new(None) };
}

/// The body at `now`. Within one millisecond (the timestamp's resolution) and one
/// snapshot every request gets the same bytes, so a client polling hard costs a
/// reference count per request rather than a body written out. Kept per thread:
/// no lock is shared between the runtime's workers.
fn body(cache: &StatusCache, now: DateTime<Utc>) -> Bytes {
    let snapshot = cache.snapshot();
    let millis = now.timestamp_millis();
    RENDERED.with_borrow_mut(|last| {
        if let Some(r) = last
            && r.millis == millis
            && Arc::ptr_eq(&r.snapshot, &snapshot)
        {
            return r.body.clone();
        }
        let body = Bytes::from(snapshot.body_at(now));
        *last = Some(Rendered {
            snapshot,
            millis,
            body: body.clone(),
        });
        body
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn one_body_per_millisecond_and_snapshot() {
        let t = at("2026-11-30T10:00:00.000Z");
        let (cache, publish) = StatusCache::never_started(t);
        let first = body(&cache, t);
        assert_eq!(first, cache.snapshot().body_at(t));
        let same_ms = body(&cache, at("2026-11-30T10:00:00.000900Z"));
        assert_eq!(
            same_ms.as_ptr(),
            first.as_ptr(),
            "the same bytes, not a copy"
        );

        let next_ms = at("2026-11-30T10:00:00.001Z");
        let later = body(&cache, next_ms);
        assert_ne!(later.as_ptr(), first.as_ptr());
        assert_eq!(later, cache.snapshot().body_at(next_ms));
        assert!(later.starts_with(b"{\"timestamp\":\"2026-11-30T10:00:00.001Z\""));

        // A new snapshot in the same millisecond is served at once.
        let (other, _) = StatusCache::never_started(next_ms);
        publish.send_replace(other.snapshot());
        let fresh = body(&cache, next_ms);
        assert_ne!(fresh.as_ptr(), later.as_ptr());
        assert_eq!(fresh, cache.snapshot().body_at(next_ms));
    }
}
