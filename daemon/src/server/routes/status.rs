use axum::Json;
use axum::extract::State;
use lavender::status::Status;

use crate::server::AppState;

/// `GET /status`: the contract, from the cache (ages computed now).
pub async fn get(State(app): State<AppState>) -> Json<Status> {
    Json(app.cache.status())
}
