use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use lavender_api::Endpoint;
use lavender_api::endpoint::DaemonReload;

use crate::server::AppState;
use crate::server::error::ApiError;

/// `POST /daemon/reload`: the config file read again, as SIGHUP does. Answers with
/// the file and each changed key with when it takes effect (`now`, `next_worker`,
/// `next_start`, `next_daemon`); 422 with the error when the file does not load
/// (the daemon keeps the config it had).
pub async fn post(
    State(app): State<AppState>,
) -> Result<Json<<DaemonReload as Endpoint>::Reply>, ApiError> {
    let (reply, rx) = tokio::sync::oneshot::channel();
    let gone = || {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the daemon is shutting down",
        )
    };
    app.reload.send(reply).await.map_err(|_| gone())?;
    let report = rx.await.map_err(|_| gone())?;
    report
        .map(Json)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e))
}
