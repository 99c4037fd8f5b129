//! One file per route.

pub mod checkpoints;
pub mod dashboard;
pub mod events;
pub mod healthz;
pub mod history;
pub mod logs;
pub mod metrics;
pub mod prune;
pub mod reload;
pub mod restart;
pub mod runs;
pub mod start;
pub mod status;
pub mod stop;
