use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use lavender_api::LogsQuery;

use crate::server::AppState;
use crate::server::error::ApiError;

const DEFAULT_LINES: usize = 100;
const MAX_LINES: usize = 10_000;

/// `GET /logs?lines=N`: the last N lines of the pipeline log, as text.
pub async fn get(
    State(app): State<AppState>,
    Query(params): Query<LogsQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let n = params.lines.unwrap_or(DEFAULT_LINES).min(MAX_LINES);
    let record = app.pipeline.record();
    let Some(path) = crate::logs::current_log(&app.layout, record.log_file.as_deref()) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no pipeline log yet in {}", app.layout.logs_dir().display()),
        ));
    };
    let text = tokio::task::spawn_blocking(move || crate::logs::tail(&path, n))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text))
}
