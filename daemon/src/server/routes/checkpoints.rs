use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use lavender_api::{CheckpointInfo, CheckpointsQuery};

use crate::checkpoints::inventory;
use crate::server::AppState;
use crate::server::error::ApiError;

/// `GET /checkpoints[?run=ID]`: complete checkpoints of a run (default: the newest), oldest first.
pub async fn get(
    State(app): State<AppState>,
    Query(params): Query<CheckpointsQuery>,
) -> Result<Json<Vec<CheckpointInfo>>, ApiError> {
    let layout = app.layout.clone();
    let mut list =
        tokio::task::spawn_blocking(move || inventory::checkpoints(&layout, params.run.as_deref()))
            .await
            .map_err(ApiError::internal)?
            .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, format!("{e:#}")))?;
    // Where each one's copies are, as the replication task last listed them.
    if let Some(replication) = &app.cache.snapshot().replication {
        for c in &mut list {
            let run = c.path.parent().and_then(|p| p.file_name());
            if let Some(run) = run.and_then(|r| r.to_str()) {
                c.remote = replication.is_remote(run, &c.name);
            }
        }
    }
    Ok(Json(list))
}
