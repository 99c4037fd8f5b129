use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::status::StatusCache;

/// `GET /status`: the contract, from the cache (ages computed now), plus the
/// notification counts per channel. The body is written out per request: the
/// snapshot holds everything but the ages, so that is a few hundred bytes of JSON.
pub async fn get(State(cache): State<StatusCache>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        cache.snapshot().body_at(lavender::time::now_utc()),
    )
}
