use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lavender_api::Endpoint;
use lavender_api::endpoint::Start;

use lavender_api::ResumableRefusal;

use crate::pipeline::StartError;
use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::strict_json::StrictJson;

/// `POST /pipeline/start`: body mirrors the CLI flags; 409 when already running, and
/// when an unfinished run could be resumed and neither `resume` nor `fresh` was given
/// (the body then also carries `run_dir`, `resume_command` and `fresh_command`).
pub async fn post(
    State(app): State<AppState>,
    StrictJson(req): StrictJson<<Start as Endpoint>::Request>,
) -> Result<Json<<Start as Endpoint>::Reply>, Response> {
    let reply = app.pipeline.start(req).await.map_err(|e| {
        let status = match e {
            StartError::AlreadyRunning { .. }
            | StartError::Resumable { .. }
            | StartError::ConfigDiffers(_) => StatusCode::CONFLICT,
            StartError::Invalid(_) => StatusCode::BAD_REQUEST,
            StartError::Spawn(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        match &e {
            StartError::Resumable {
                run_dir,
                resume_command,
                fresh_command,
                ..
            } => (
                status,
                Json(ResumableRefusal {
                    error: e.to_string(),
                    fresh_command: fresh_command.clone(),
                    resume_command: resume_command.clone(),
                    run_dir: run_dir.clone(),
                }),
            )
                .into_response(),
            _ => ApiError::new(status, e.to_string()).into_response(),
        }
    })?;
    // A status read right after the start shows the pipeline running.
    app.cache.caught_up(&app.pipeline.record()).await;
    Ok(Json(reply))
}
