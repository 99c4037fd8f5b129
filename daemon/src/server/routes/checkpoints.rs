use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::Deserialize;

use crate::inventory::{self, CheckpointInfo};
use crate::server::AppState;
use crate::server::error::ApiError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    run: Option<String>,
}

/// `GET /checkpoints[?run=ID]`: complete checkpoints of a run (default: the newest), oldest first.
pub async fn get(
    State(app): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Json<Vec<CheckpointInfo>>, ApiError> {
    let layout = app.layout.clone();
    tokio::task::spawn_blocking(move || inventory::checkpoints(&layout, params.run.as_deref()))
        .await
        .map_err(ApiError::internal)?
        .map(Json)
        .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, format!("{e:#}")))
}
