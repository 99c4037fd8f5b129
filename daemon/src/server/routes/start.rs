use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::pipeline::{StartError, StartReply, StartRequest};
use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::strict_json::StrictJson;

/// `POST /pipeline/start`: body mirrors the CLI flags; 409 when already running.
pub async fn post(
    State(app): State<AppState>,
    StrictJson(req): StrictJson<StartRequest>,
) -> Result<Json<StartReply>, ApiError> {
    let reply = app.pipeline.start(req).await.map_err(|e| {
        let status = match e {
            StartError::AlreadyRunning { .. } => StatusCode::CONFLICT,
            StartError::Invalid(_) => StatusCode::BAD_REQUEST,
            StartError::Spawn(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    })?;
    // A status read right after the start shows the pipeline running.
    app.cache.caught_up(&app.pipeline.record()).await;
    Ok(Json(reply))
}
