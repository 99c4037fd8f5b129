//! Timings of supervision: restart backoff and limits, stop timeout, liveness
//! polling. From the config's `supervisor:` section (tests shorten the backoff with
//! fractional seconds, `restart_backoff_s: [0.05, 0.1]`).

use std::time::Duration;

use lavender::config::SupervisorConfig;

use crate::backoff::Backoff;

#[derive(Debug, Clone, PartialEq)]
pub struct Timings {
    /// The wait before restart N.
    pub backoff: Backoff,
    pub max_restarts: u32,
    pub reset_after: Duration,
    pub stop_timeout: Duration,
    /// How often a re-adopted worker (not our child) is checked for liveness.
    pub poll_interval: Duration,
    pub stale_after_s: u64,
    pub startup_grace_s: u64,
}

impl Timings {
    pub fn from_config(sup: &SupervisorConfig) -> Timings {
        Timings {
            backoff: Backoff::from_secs(&sup.restart_backoff_s),
            max_restarts: sup.max_restarts,
            reset_after: Duration::from_secs(sup.restart_reset_after_s),
            stop_timeout: Duration::from_secs(sup.stop_timeout_s),
            poll_interval: Duration::from_millis(sup.poll_interval_ms.clamp(10, 5_000)),
            stale_after_s: sup.stale_after_s,
            startup_grace_s: sup.startup_grace_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_sequence_repeats_last() {
        let t = Timings::from_config(&lavender::config::Config::default().supervisor);
        assert_eq!(t.backoff.before(1), Duration::from_secs(10));
        assert_eq!(t.backoff.before(2), Duration::from_secs(30));
        assert_eq!(t.backoff.before(3), Duration::from_secs(90));
        assert_eq!(t.backoff.before(7), Duration::from_secs(90));
    }

    #[test]
    fn fractional_seconds_are_milliseconds() {
        let mut sup = lavender::config::Config::default().supervisor;
        sup.restart_backoff_s = vec![0.05, 0.25];
        let t = Timings::from_config(&sup);
        assert_eq!(t.backoff.before(1), Duration::from_millis(50));
        assert_eq!(t.backoff.before(2), Duration::from_millis(250));
        assert_eq!(t.backoff.before(3), Duration::from_millis(250));
    }
}
