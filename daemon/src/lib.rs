//! lavenderd: the supervisor daemon of the lavender training pipeline and its CLI.
//! The daemon is a library so tests and `start --foreground` can run it in-process.

pub mod alert;
pub mod backoff;
pub(crate) mod checkpoints;
pub mod cli;
pub(crate) mod client;
pub(crate) mod config_source;
pub(crate) mod confirm;
pub(crate) mod daemon;
pub(crate) mod decisions;
pub(crate) mod drill;
pub mod events;
pub(crate) mod evidence;
pub(crate) mod exe;
pub mod exit;
pub(crate) mod feed;
pub(crate) mod filesystem;
pub(crate) mod goodput;
pub(crate) mod locate;
pub mod logging;
pub(crate) mod logs;
pub(crate) mod old_runs;
pub mod pipeline;
pub mod process;
pub mod push;
pub(crate) mod replicate;
pub(crate) mod server;
pub mod service;
pub(crate) mod settings;
pub(crate) mod status;
pub(crate) mod tracking;
pub(crate) mod web;
