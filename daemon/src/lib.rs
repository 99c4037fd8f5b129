//! lavenderd: the supervisor daemon of the lavender training pipeline and its CLI.
//! The daemon is a library so tests and `start --foreground` can run it in-process.

pub mod cli;
pub mod daemon;
pub mod feed;
pub mod inventory;
pub mod layout;
pub mod logging;
pub mod logs;
pub mod notify;
pub mod pipeline;
pub mod process;
pub mod server;
pub mod service;
pub mod settings;
pub mod status;
pub mod web;
