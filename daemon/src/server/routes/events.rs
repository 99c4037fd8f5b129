use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{KeepAlive, Sse};

use crate::server::AppState;

/// A comment line this often keeps idle connections (and proxies) open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /events`: Server-Sent Events (state, heartbeat, milestone, alert), resumable
/// with `Last-Event-ID`.
pub async fn get(State(app): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    let last = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let replay = app.web.feed.replay_from(last);
    Sse::new(crate::web::events::stream(app.web.clone(), replay))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}
