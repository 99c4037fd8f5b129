use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::server::AppState;
use crate::server::error::ApiError;
use crate::web::metrics::{self, Inputs};

/// `GET /metrics`: Prometheus text format.
pub async fn get(State(app): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let status = app.cache.status();
    let data_root = app.layout.data_root.clone();
    let disk = tokio::task::spawn_blocking(move || metrics::disk_available_bytes(&data_root))
        .await
        .map_err(ApiError::internal)?;
    let web = &app.web;
    let checkpoints = web.checkpoints.as_ref().map(|r| r.borrow().clone());
    let text = metrics::render(&Inputs {
        status: &status,
        disk_available_bytes: disk,
        worker_restarts: web
            .counters
            .worker_restarts
            .load(std::sync::atomic::Ordering::Relaxed),
        notifications: web
            .notifications
            .as_ref()
            .map(crate::web::metrics::notification_counts),
        checkpoints: checkpoints.as_ref(),
    });
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    ))
}
