use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::server::AppState;

/// `GET /healthz`: the daemon answers; its pid, when this daemon image started
/// (it changes when the daemon restarts alone, the pid does not) and the pipeline state.
pub async fn get(State(app): State<AppState>) -> Json<Value> {
    let record = app.pipeline.record();
    Json(json!({
        "ok": true,
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "started_at": &*app.started_at,
        "data_root": app.layout.data_root,
        "state": record.state,
    }))
}
