//! Benchmark tools for lavender (not part of the product): an HTTP load generator
//! for TCP and Unix sockets (requests through the workspace's one client,
//! `lavender-client`), timers for how fast the daemon notices a crash or a
//! heartbeat, and a loopback webhook receiver for alert latency.

pub mod args;
pub mod detect;
pub mod hook;
pub mod load;
pub mod retention;
pub mod stats;
