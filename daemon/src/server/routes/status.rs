use axum::Json;
use axum::extract::State;

use crate::server::AppState;

/// `GET /status`: the contract, from the cache (ages computed now), plus the
/// notification counts per channel.
pub async fn get(State(app): State<AppState>) -> Json<serde_json::Value> {
    Json(app.cache.status_json())
}
