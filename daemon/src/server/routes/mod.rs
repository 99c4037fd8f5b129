//! One file per route.

pub mod checkpoints;
pub mod healthz;
pub mod logs;
pub mod runs;
pub mod start;
pub mod status;
pub mod stop;
