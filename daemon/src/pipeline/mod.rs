//! The pipeline: the configured steps run in order by one actor that owns the
//! state machine (idle → running(step) → stopping → stopped | finished | crashed | failed).

pub(crate) mod actor;
pub(crate) mod handle;
pub(crate) mod inputs;
pub(crate) mod judge;
pub(crate) mod markers;
pub(crate) mod plan;
pub(crate) mod policy;
pub(crate) mod record;
pub(crate) mod request;
pub(crate) mod restart;
pub(crate) mod resumable;
pub(crate) mod stop;

pub use handle::{HungReport, PipelineHandle, StartError, StartReply};
pub use record::{PipelineRecord, StopCause};
pub use request::StartRequest;
pub use stop::StopReport;
