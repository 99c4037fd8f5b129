//! lavenderd: the supervisor daemon of the lavender training pipeline and its CLI.
//! The daemon is a library so tests and `start --foreground` can run it in-process.

pub mod layout;
pub mod pipeline;
pub mod process;
