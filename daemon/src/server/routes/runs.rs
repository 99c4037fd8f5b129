use axum::Json;
use axum::extract::State;
use lavender_api::Endpoint;
use lavender_api::endpoint::Runs;

use crate::checkpoints::inventory;
use crate::server::AppState;
use crate::server::error::ApiError;

/// `GET /runs`: run directories, newest first.
pub async fn get(State(app): State<AppState>) -> Result<Json<<Runs as Endpoint>::Reply>, ApiError> {
    let layout = app.layout.clone();
    tokio::task::spawn_blocking(move || inventory::runs(&layout))
        .await
        .map_err(ApiError::internal)?
        .map(Json)
        .map_err(|e| ApiError::internal(format!("{e:#}")))
}
