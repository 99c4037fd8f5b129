//! Timings of supervision: restart backoff and limits, stop timeout, liveness
//! polling. From the config's `supervisor:` section (tests shorten the backoff with
//! fractional seconds, `restart_backoff_s: [0.05, 0.1]`).

use std::time::Duration;

use lavender::config::SupervisorConfig;

#[derive(Debug, Clone, PartialEq)]
pub struct Timings {
    pub backoff: Vec<Duration>,
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
            backoff: sup
                .restart_backoff_s
                .iter()
                .map(|s| Duration::try_from_secs_f64(*s).unwrap_or_default())
                .collect(),
            max_restarts: sup.max_restarts,
            reset_after: Duration::from_secs(sup.restart_reset_after_s),
            stop_timeout: Duration::from_secs(sup.stop_timeout_s),
            poll_interval: Duration::from_millis(sup.poll_interval_ms.clamp(10, 5_000)),
            stale_after_s: sup.stale_after_s,
            startup_grace_s: sup.startup_grace_s,
        }
    }

    /// The wait before restart number `restart` (1-based); the last value repeats.
    pub fn backoff_for(&self, restart: u32) -> Duration {
        let idx = (restart.max(1) - 1) as usize;
        self.backoff
            .get(idx)
            .or(self.backoff.last())
            .copied()
            .unwrap_or(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_sequence_repeats_last() {
        let t = Timings::from_config(&lavender::config::Config::default().supervisor);
        assert_eq!(t.backoff_for(1), Duration::from_secs(10));
        assert_eq!(t.backoff_for(2), Duration::from_secs(30));
        assert_eq!(t.backoff_for(3), Duration::from_secs(90));
        assert_eq!(t.backoff_for(7), Duration::from_secs(90));
    }

    #[test]
    fn fractional_seconds_are_milliseconds() {
        let mut sup = lavender::config::Config::default().supervisor;
        sup.restart_backoff_s = vec![0.05, 0.25];
        let t = Timings::from_config(&sup);
        assert_eq!(t.backoff_for(1), Duration::from_millis(50));
        assert_eq!(t.backoff_for(2), Duration::from_millis(250));
        assert_eq!(t.backoff_for(3), Duration::from_millis(250));
    }
}
