//! Timings of supervision: restart backoff and limits, stop timeout, the grace a
//! hung worker gets between SIGTERM and SIGKILL, liveness polling. From the
//! config's `supervisor:` section (tests shorten the backoff with fractional
//! seconds, `restart_backoff_s: [0.05, 0.1]`).

use std::time::Duration;

use lavender::config::SupervisorConfig;

use crate::backoff::Backoff;

#[derive(Debug, Clone, PartialEq)]
pub struct Timings {
    /// The wait before the 2nd, 3rd, … restart in a row (see [`Timings::restart_delay`]).
    pub backoff: Backoff,
    pub max_restarts: u32,
    pub reset_after: Duration,
    pub stop_timeout: Duration,
    /// How often a re-adopted worker (not our child) is checked for liveness.
    pub poll_interval: Duration,
    /// SIGTERM → SIGKILL for a hung worker.
    pub stall_kill_grace: Duration,
}

impl Timings {
    pub fn from_config(sup: &SupervisorConfig) -> Timings {
        Timings {
            backoff: Backoff::from_secs(&sup.restart_backoff_s),
            max_restarts: sup.max_restarts,
            reset_after: Duration::from_secs(sup.restart_reset_after_s),
            stop_timeout: Duration::from_secs(sup.stop_timeout_s),
            poll_interval: Duration::from_millis(sup.poll_interval_ms.clamp(10, 5_000)),
            stall_kill_grace: Duration::try_from_secs_f64(sup.stall_kill_grace_s)
                .unwrap_or(Duration::from_secs(10)),
        }
    }

    /// The wait before restart `n` in a row (1-based): none before the first, as
    /// torchrun restarts at once; then `restart_backoff_s` in turn, its last value
    /// repeating.
    pub fn restart_delay(&self, n: u32) -> Duration {
        if n <= 1 {
            Duration::ZERO
        } else {
            self.backoff.before(n - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_restart_is_immediate_then_the_backoff_repeats_its_last() {
        let t = Timings::from_config(&lavender::config::Config::default().supervisor);
        assert_eq!(t.restart_delay(1), Duration::ZERO);
        assert_eq!(t.restart_delay(2), Duration::from_secs(10));
        assert_eq!(t.restart_delay(3), Duration::from_secs(30));
        assert_eq!(t.restart_delay(4), Duration::from_secs(90));
        assert_eq!(t.restart_delay(8), Duration::from_secs(90));
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
