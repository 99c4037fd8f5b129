//! `GET /status`.

use lavender::status::Status;
use serde::{Deserialize, Serialize};

/// A status body as served: the contract, then every key the daemon adds to it
/// (`notifications`, …), so `status --json` prints all of `GET /status`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ServedStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}
