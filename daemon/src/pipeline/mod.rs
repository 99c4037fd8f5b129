//! The pipeline: the configured steps run in order by one actor that owns the
//! state machine (idle → running(step) → stopping → stopped | finished | crashed | failed).

pub mod actor;
pub mod alert;
pub mod judge;
pub mod markers;
pub mod plan;
pub mod record;
pub mod request;
pub mod restart;
pub mod retention;
pub mod stop;

pub use actor::{PipelineHandle, StartError, StartReply};
pub use alert::Alert;
pub use record::PipelineRecord;
pub use request::StartRequest;
pub use stop::StopReport;
