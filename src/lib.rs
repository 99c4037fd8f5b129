//! lavender core: the on-disk contract shared by the daemon (`lavenderd`) and the
//! worker (`lavender-worker`). Nothing here needs libtorch or an async runtime.

pub mod atomic;
pub mod checkpoint;
pub mod compose;
pub mod config;
pub mod data_order;
pub mod data_root;
pub mod error;
pub mod events;
pub mod failure;
pub mod goodput;
pub mod hard_examples;
pub mod heartbeat;
pub mod layout;
pub mod log_history;
pub mod manifest;
pub mod openmp;
pub mod pipeline_file;
pub mod pipeline_step;
pub mod replay;
pub mod run;
pub mod skips;
pub mod stall;
pub mod status;
pub mod step_heartbeat;
pub mod steps;
pub mod time;
pub mod tokens;
pub mod tracking;
pub mod trainer_state;
pub mod trainlog;

pub use error::{Error, Result};
