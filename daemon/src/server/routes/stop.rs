use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use lavender_api::Endpoint;
use lavender_api::endpoint::Stop;

use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::strict_json::StrictJson;

/// `POST /pipeline/stop`: SIGTERM, wait, SIGKILL after the timeout; answers with
/// what the stop saved once the worker has exited.
pub async fn post(
    State(app): State<AppState>,
    StrictJson(body): StrictJson<<Stop as Endpoint>::Request>,
) -> Result<Json<<Stop as Endpoint>::Reply>, ApiError> {
    let timeout = match body.timeout_s {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("timeout_s {s} must be a non-negative number of seconds"),
            ));
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let report = app
        .pipeline
        .stop(timeout)
        .await
        .map_err(|e| ApiError::internal(format!("{e:#}")))?;
    // A status read right after the stop shows what the stop saved.
    app.cache.caught_up(&app.pipeline.record()).await;
    Ok(Json(report))
}
