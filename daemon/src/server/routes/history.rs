use std::path::PathBuf;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use lavender_api::{DEFAULT_POINTS, HistoryQuery, HistoryResponse, MAX_POINTS, Route};

use crate::server::AppState;
use crate::server::error::ApiError;
use crate::web::history::{HistoryError, response};

/// The id `current` names the run the status is about.
pub const CURRENT: &str = "current";

/// `GET /runs/{id}/history?points=N`: loss, smoothed loss, learning rate, grad
/// norm and eval loss, each downsampled to at most N points.
pub async fn get(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<HistoryQuery>,
) -> Result<Json<HistoryResponse>, ApiError> {
    let points = params.points.unwrap_or(DEFAULT_POINTS);
    if points < 2 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("points={points}: ask for at least 2 (at most {MAX_POINTS} are sent)"),
        ));
    }
    let points = points.min(MAX_POINTS);
    let (run, dir) = run_dir(&app, &id)?;
    let history = app.web.history.clone();
    tokio::task::spawn_blocking(move || {
        history.load(&dir).map(|l| {
            tracing::debug!(run = %run, parse = ?l.parse, "history answered");
            Json(response(run, l.source, &l.series, points))
        })
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(|e| match e {
        HistoryError::Missing(_) => ApiError::new(StatusCode::NOT_FOUND, e.to_string()),
        _ => ApiError::internal(e),
    })
}

fn run_dir(app: &AppState, id: &str) -> Result<(String, PathBuf), ApiError> {
    let root = app.layout.checkpoints_root();
    let name = if id == CURRENT {
        app.web.snapshot().run.ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no run yet under {}", root.display()),
            )
        })?
    } else {
        id.to_string()
    };
    // A run id is a directory name under the checkpoints root, nothing else.
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let dir = root.join(&name);
    if !plain || !dir.is_dir() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no run {name:?} under {}; {} lists them (or use `{CURRENT}`)",
                root.display(),
                Route::Runs
            ),
        ));
    }
    Ok((name, dir))
}
