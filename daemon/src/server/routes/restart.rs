use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use lavender::status::PipelineState;
use lavender_api::Endpoint;
use lavender_api::RestartReply;
use lavender_api::endpoint::DaemonRestart;

use crate::server::AppState;
use crate::server::error::ApiError;

/// `POST /daemon/restart`: restart the daemon alone (it re-executes its binary in
/// place); the worker keeps training and is re-adopted.
/// Answers at once with what restarts; `GET /healthz` shows a new `started_at`
/// once the new daemon serves.
pub async fn post(
    State(app): State<AppState>,
) -> Result<Json<<DaemonRestart as Endpoint>::Reply>, ApiError> {
    let Some(restart) = &app.restart else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "this daemon runs in a terminal (lavenderd start --foreground) and ends with its pipeline; it does not restart alone",
        ));
    };
    let record = app.pipeline.record();
    if record.state.kind() == PipelineState::Stopping {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "a stop is under way; restart the daemon once it has finished",
        ));
    }
    let worker = record.worker();
    // A second request while one is pending finds the channel full: same restart.
    let _ = restart.try_send(());
    Ok(Json(RestartReply {
        pid: std::process::id(),
        started_at: app.started_at.to_string(),
        state: record.state.kind(),
        worker: worker.map(|w| w.handle.to_string()),
        worker_pid: worker.and_then(|w| w.handle.pid()),
    }))
}
