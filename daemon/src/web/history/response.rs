//! The JSON answer of `GET /runs/{id}/history`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::downsample::{Point, min_max};
use super::parse::{Series, StageMark};

/// Points per series when the request does not say.
pub const DEFAULT_POINTS: usize = 1000;
/// More than a screen has pixels for; a cap keeps responses bounded.
pub const MAX_POINTS: usize = 20_000;

#[derive(Debug, Serialize)]
pub struct HistoryResponse {
    pub run: String,
    /// The file read: `log_history.jsonl` or `log_history.json`.
    pub source: &'static str,
    pub entries: u64,
    pub skipped: u64,
    pub max_points: usize,
    /// loss, loss_smooth, learning_rate, grad_norm, eval_loss.
    pub series: BTreeMap<&'static str, SeriesOut>,
    pub stages: Vec<StageMark>,
}

#[derive(Debug, Serialize)]
pub struct SeriesOut {
    /// Points before downsampling.
    pub total: usize,
    /// `[step, value]` pairs, in step order.
    pub points: Vec<Point>,
}

impl HistoryResponse {
    pub fn new(run: String, source: &'static str, s: &Series, max_points: usize) -> Self {
        let out = |pts: &[Point]| SeriesOut {
            total: pts.len(),
            points: min_max(pts, max_points),
        };
        let series = BTreeMap::from([
            ("loss", out(&s.loss)),
            ("loss_smooth", out(&s.loss_smooth)),
            ("learning_rate", out(&s.learning_rate)),
            ("grad_norm", out(&s.grad_norm)),
            ("eval_loss", out(&s.eval_loss)),
        ]);
        HistoryResponse {
            run,
            source,
            entries: s.entries,
            skipped: s.skipped,
            max_points,
            series,
            stages: s.stages.clone(),
        }
    }
}
