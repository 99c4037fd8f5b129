//! The optimizer (AdamW over the flat parameter buffer) and the LR schedule.

pub mod adamw;
pub mod schedule;

pub use adamw::{AdamW, AdamWConfig, clip_grad_norm};
pub use schedule::LrSchedule;
