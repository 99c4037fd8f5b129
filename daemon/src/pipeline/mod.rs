//! The pipeline: the configured steps run in order by one actor that owns the
//! state machine (idle → running(step) → stopping → stopped | finished | crashed | failed,
//! as the record shows it); `machine/` writes down its phases and transitions.

pub(crate) mod actor;
pub(crate) mod handle;
pub(crate) mod judge;
pub(crate) mod machine;
pub(crate) mod plan;
pub(crate) mod policy;
pub(crate) mod reload;
pub(crate) mod rollback;
pub(crate) mod save_room;
pub(crate) mod stop;
pub(crate) mod timings;

pub use handle::{HungReport, PipelineHandle, ResumeMismatch, StartError};
pub use reload::Reload;
