//! Timings of supervision, as durations of the config's `supervisor:` section:
//! restart backoff and the reset of the restart count, stop timeout, the grace a
//! hung worker gets between SIGTERM and SIGKILL, liveness polling (tests shorten
//! the backoff with fractional seconds, `restart_backoff_s: [0.05, 0.1]`).

use std::time::Duration;

use lavender::config::SupervisorConfig;

use crate::backoff::Backoff;

/// The wait before restart `n` in a row (1-based): none before the first, as
/// torchrun restarts at once; then `restart_backoff_s` in turn, its last value
/// repeating.
pub fn restart_delay(sup: &SupervisorConfig, n: u32) -> Duration {
    if n <= 1 {
        Duration::ZERO
    } else {
        Backoff::from_secs(&sup.restart_backoff_s).before(n - 1)
    }
}

/// A worker that ran this long ends the restarts in a row (`restart_reset_after_s`).
pub fn reset_after(sup: &SupervisorConfig) -> Duration {
    Duration::from_secs(sup.restart_reset_after_s)
}

/// SIGTERM → SIGKILL for a worker being stopped (`stop_timeout_s`).
pub fn stop_timeout(sup: &SupervisorConfig) -> Duration {
    Duration::from_secs(sup.stop_timeout_s)
}

/// How often a re-adopted worker (not our child) is checked for liveness
/// (`poll_interval_ms`, kept within 10 ms and 5 s).
pub fn poll_interval(sup: &SupervisorConfig) -> Duration {
    Duration::from_millis(sup.poll_interval_ms.clamp(10, 5_000))
}

/// SIGTERM → SIGKILL for a hung worker (`stall_kill_grace_s`; 10 s if it is not a
/// duration).
pub fn stall_kill_grace(sup: &SupervisorConfig) -> Duration {
    Duration::try_from_secs_f64(sup.stall_kill_grace_s).unwrap_or(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_restart_is_immediate_then_the_backoff_repeats_its_last() {
        let sup = lavender::config::Config::default().supervisor;
        assert_eq!(restart_delay(&sup, 1), Duration::ZERO);
        assert_eq!(restart_delay(&sup, 2), Duration::from_secs(10));
        assert_eq!(restart_delay(&sup, 3), Duration::from_secs(30));
        assert_eq!(restart_delay(&sup, 4), Duration::from_secs(90));
        assert_eq!(restart_delay(&sup, 8), Duration::from_secs(90));
    }

    #[test]
    fn fractional_seconds_are_milliseconds() {
        let mut sup = lavender::config::Config::default().supervisor;
        sup.restart_backoff_s = vec![0.05, 0.25];
        assert_eq!(restart_delay(&sup, 2), Duration::from_millis(50));
        assert_eq!(restart_delay(&sup, 3), Duration::from_millis(250));
        assert_eq!(restart_delay(&sup, 4), Duration::from_millis(250));
    }
}
