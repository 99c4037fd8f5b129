//! Waiting for a condition with a deadline.

use std::time::{Duration, Instant};

/// Polls `cond` every 25 ms; panics naming `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}
