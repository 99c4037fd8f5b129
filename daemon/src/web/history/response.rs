//! The JSON answer of `GET /runs/{id}/history` (`lavender_api::HistoryResponse`),
//! made from a run's parsed series.

use std::collections::BTreeMap;

use lavender_api::{HistoryResponse, Point, SeriesOut};

use super::downsample::min_max;
use super::parse::Series;

/// The answer for `run`, read from `source`, with at most `max_points` per series.
pub fn response(run: String, source: &str, s: &Series, max_points: usize) -> HistoryResponse {
    let out = |pts: &[Point]| SeriesOut {
        total: pts.len(),
        points: min_max(pts, max_points),
    };
    let series = BTreeMap::from([
        ("loss".to_string(), out(&s.loss)),
        ("loss_smooth".to_string(), out(&s.loss_smooth)),
        ("learning_rate".to_string(), out(&s.learning_rate)),
        ("grad_norm".to_string(), out(&s.grad_norm)),
        ("eval_loss".to_string(), out(&s.eval_loss)),
    ]);
    HistoryResponse {
        run,
        source: source.to_string(),
        entries: s.entries,
        skipped: s.skipped,
        max_points,
        series,
        stages: s.stages.clone(),
    }
}
