use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use lavender_api::Endpoint;
use lavender_api::endpoint::Prune;

use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::strict_json::StrictJson;

/// `POST /runs/prune`: the plan (no `delete`), or the named runs of it deleted, by
/// the pipeline's actor (never the run being started or run); 409 with the reason
/// when the plan cannot be made (a run's lineage unreadable).
pub async fn post(
    State(app): State<AppState>,
    StrictJson(body): StrictJson<<Prune as Endpoint>::Request>,
) -> Result<Json<<Prune as Endpoint>::Reply>, ApiError> {
    app.pipeline
        .prune(body)
        .await
        .map(Json)
        .map_err(|e| ApiError::new(StatusCode::CONFLICT, e))
}
