//! `GET /runs/{id}/history?points=N`: a run's curves, each cut down to at most N
//! points.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Points per series when the request does not say.
pub const DEFAULT_POINTS: usize = 1000;
/// More than a screen has pixels for; a cap keeps responses bounded.
pub const MAX_POINTS: usize = 20_000;

/// `[step, value]`.
pub type Point = [f64; 2];

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// At most this many points per series (default [`DEFAULT_POINTS`], at least 2,
    /// at most [`MAX_POINTS`] are sent).
    pub points: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryResponse {
    pub run: String,
    /// The file read: `log_history.jsonl` or `log_history.json`.
    pub source: String,
    pub entries: u64,
    pub skipped: u64,
    pub max_points: usize,
    /// loss, loss_smooth, learning_rate, grad_norm, eval_loss.
    pub series: BTreeMap<String, SeriesOut>,
    pub stages: Vec<StageMark>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesOut {
    /// Points before downsampling.
    pub total: usize,
    /// `[step, value]` pairs, in step order.
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageMark {
    pub name: String,
    /// The first step logged in this stage.
    pub step: f64,
}
