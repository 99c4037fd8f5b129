//! The curves of a run for `GET /runs/{id}/history`: the worker's per-step
//! `log_history.jsonl` sidecar (or the `log_history.json` array it materializes
//! at checkpoints), parsed once and extended as it grows, then cut down to at
//! most N points per series so any run length draws equally fast.

pub mod cache;
pub mod downsample;
pub mod parse;
pub mod response;

pub use cache::{HistoryCache, HistoryError};
pub use parse::Series;
pub use response::response;
