//! Speed and time-to-finish from recent progress.
//!
//! A pure estimator fed `(step, seconds)` observations: the speed is measured over a
//! sliding time window (never fewer than `min_samples` observations), so the ETA
//! follows a change of speed within one window instead of averaging the whole run.

use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct EtaEstimator {
    window_s: f64,
    min_samples: usize,
    samples: VecDeque<(u64, f64)>,
}

impl EtaEstimator {
    pub fn new(window_s: f64, min_samples: usize) -> Self {
        EtaEstimator {
            window_s,
            min_samples: min_samples.max(2),
            samples: VecDeque::new(),
        }
    }

    /// Records that `step` steps were done at time `t` (seconds, any origin).
    pub fn observe(&mut self, step: u64, t: f64) {
        if let Some(&(last_step, _)) = self.samples.back()
            && step < last_step
        {
            // A restart from an earlier step: old speed says nothing.
            self.samples.clear();
        }
        self.samples.push_back((step, t));
        while self.samples.len() > self.min_samples {
            let (_, t0) = self.samples[1];
            if t - t0 >= self.window_s {
                self.samples.pop_front();
            } else {
                break;
            }
        }
    }

    /// Steps per second over the window, once two observations span some time.
    pub fn steps_per_sec(&self) -> Option<f64> {
        let (&(s0, t0), &(s1, t1)) = (self.samples.front()?, self.samples.back()?);
        let dt = t1 - t0;
        (dt > 0.0 && s1 > s0).then(|| (s1 - s0) as f64 / dt)
    }

    /// Seconds until `total` steps at the recent speed.
    pub fn eta_seconds(&self, total: u64) -> Option<f64> {
        let rate = self.steps_per_sec()?;
        let (done, _) = *self.samples.back()?;
        Some(total.saturating_sub(done) as f64 / rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_follows_a_slowdown_within_ten_percent() {
        let total = 10_000u64;
        let mut eta = EtaEstimator::new(30.0, 5);
        let mut t = 0.0;
        // 20 steps/s for 2000 steps (100 s).
        for step in 1..=2000 {
            t += 0.05;
            eta.observe(step, t);
        }
        let fast = eta.eta_seconds(total).unwrap();
        assert!((fast - 8000.0 / 20.0).abs() / 400.0 < 0.01, "{fast}");
        // Then 4 steps/s: the truth for the rest is (total - step) / 4.
        let mut checked = false;
        for step in 2001..=4000 {
            t += 0.25;
            eta.observe(step, t);
            let since_change = (step - 2000) as f64 * 0.25;
            if since_change >= 35.0 {
                let truth = (total - step) as f64 / 4.0;
                let got = eta.eta_seconds(total).unwrap();
                assert!(
                    (got - truth).abs() / truth < 0.10,
                    "{since_change} s after the slowdown: eta {got} vs truth {truth}"
                );
                checked = true;
            }
        }
        assert!(checked);
        assert!((eta.steps_per_sec().unwrap() - 4.0).abs() < 0.01);
    }

    #[test]
    fn no_estimate_without_progress_and_reset_on_restart() {
        let mut eta = EtaEstimator::new(10.0, 2);
        assert!(eta.eta_seconds(10).is_none());
        eta.observe(5, 1.0);
        assert!(eta.steps_per_sec().is_none());
        eta.observe(6, 2.0);
        assert_eq!(eta.steps_per_sec(), Some(1.0));
        eta.observe(1, 3.0);
        assert!(
            eta.steps_per_sec().is_none(),
            "resumed from an earlier step"
        );
    }
}
