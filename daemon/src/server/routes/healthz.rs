use axum::Json;
use axum::extract::State;
use lavender_api::Endpoint;
use lavender_api::Health;
use lavender_api::endpoint::Healthz;

use crate::server::AppState;

/// `GET /healthz`: the daemon answers; its pid, when this daemon image started
/// (it changes when the daemon restarts alone, the pid does not) and the pipeline state.
pub async fn get(State(app): State<AppState>) -> Json<<Healthz as Endpoint>::Reply> {
    let record = app.pipeline.record();
    Json(Health {
        data_root: app.layout.data_root.clone(),
        ok: true,
        pid: std::process::id(),
        started_at: app.started_at.to_string(),
        state: record.state.kind(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
}
