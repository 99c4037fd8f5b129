use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::server::AppState;

/// `GET /healthz`: the daemon answers; its pid and the pipeline state.
pub async fn get(State(app): State<AppState>) -> Json<Value> {
    let record = app.pipeline.record();
    Json(json!({
        "ok": true,
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "data_root": app.layout.data_root,
        "state": record.state,
    }))
}
