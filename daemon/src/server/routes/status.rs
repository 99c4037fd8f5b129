use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::server::AppState;

/// `GET /status`: the contract, from the cache (ages computed now), plus the
/// notification counts per channel.
pub async fn get(State(app): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        app.cache.status_body(),
    )
}
