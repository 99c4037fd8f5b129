//! lavender's API between the daemon and its clients: the route table
//! ([`routes`]), each JSON route paired with its request and reply types
//! ([`endpoint`]), and every request and response type, serde data alone. The
//! daemon's server routes, its CLI and the HTTP client all name them from here, so
//! a route or a body is written once. What the daemon does to answer (plan a
//! start, take a stop's mark, judge when a changed key takes effect) stays in the
//! daemon. The start request is the core's (`lavender::pipeline_file::StartRequest`),
//! named here too: the pipeline's record on disk keeps it.
//!
//! Without its default feature `messages`, the crate is the route table alone and
//! has no dependency.

pub mod routes;

#[cfg(feature = "messages")]
pub mod endpoint;

#[cfg(feature = "messages")]
mod daemon;
#[cfg(feature = "messages")]
mod error;
#[cfg(feature = "messages")]
mod history;
#[cfg(feature = "messages")]
mod listing;
#[cfg(feature = "messages")]
mod prune;
#[cfg(feature = "messages")]
mod reload;
#[cfg(feature = "messages")]
mod start;
#[cfg(feature = "messages")]
mod status;
#[cfg(feature = "messages")]
mod stop;

pub use routes::{Method, Route};

#[cfg(feature = "messages")]
pub use endpoint::Endpoint;

#[cfg(feature = "messages")]
pub use daemon::{Health, RestartReply};
#[cfg(feature = "messages")]
pub use error::ErrorBody;
#[cfg(feature = "messages")]
pub use history::{
    DEFAULT_POINTS, HistoryQuery, HistoryResponse, MAX_POINTS, Point, SeriesOut, StageMark,
};
#[cfg(feature = "messages")]
pub use listing::{CheckpointInfo, CheckpointsQuery, LogsQuery, RunInfo, Verification};
#[cfg(feature = "messages")]
pub use prune::{PruneReply, PruneRequest};
#[cfg(feature = "messages")]
pub use reload::{KeyChange, ReloadReport, TakesEffect};
#[cfg(feature = "messages")]
pub use start::{ConfigFileRef, MAX_CHUNK, ResumableRefusal, StartReply, StartRequest, sha256_hex};
#[cfg(feature = "messages")]
pub use status::ServedStatus;
#[cfg(feature = "messages")]
pub use stop::{StopReport, StopRequest};
