use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::status::StatusCache;

/// `GET /status`: the contract, from the cache (ages computed now), plus the
/// notification counts per channel.
pub async fn get(State(cache): State<StatusCache>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        cache.status_body(),
    )
}
