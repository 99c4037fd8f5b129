//! Where the daemon keeps things: the core's [`lavender::layout::Layout`], which the
//! commands that read the daemon's files with no daemon use too.

pub use lavender::layout::Layout;
