//! Learning rate: linear warm-up, then cosine decay to a floor.

use std::f64::consts::PI;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrSchedule {
    pub peak: f64,
    /// Warm-up steps, clamped to half the stage so a short stage still decays.
    pub warmup: u64,
    pub total: u64,
    /// The floor as a fraction of `peak`.
    pub min_ratio: f64,
}

impl LrSchedule {
    pub fn new(peak: f64, warmup: u64, total: u64, min_ratio: f64) -> LrSchedule {
        LrSchedule {
            peak,
            warmup: warmup.min(total / 2),
            total,
            min_ratio,
        }
    }

    /// The LR of 0-based `step` within the stage.
    pub fn lr(&self, step: u64) -> f64 {
        let floor = self.peak * self.min_ratio;
        if step < self.warmup {
            return self.peak * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1);
        let progress = ((step - self.warmup) as f64 / span as f64).min(1.0);
        floor + (self.peak - floor) * 0.5 * (1.0 + (PI * progress).cos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warms_up_linearly_then_decays_by_cosine_to_the_floor() {
        let s = LrSchedule::new(1e-3, 10, 110, 0.1);
        assert!((s.lr(0) - 1e-4).abs() < 1e-12);
        assert!((s.lr(4) - 5e-4).abs() < 1e-12);
        assert!((s.lr(9) - 1e-3).abs() < 1e-12);
        assert!((s.lr(10) - 1e-3).abs() < 1e-12, "decay starts at the peak");
        // Halfway through the decay: midpoint between peak and floor.
        assert!((s.lr(60) - (1e-4 + 0.5 * 9e-4)).abs() < 1e-12);
        assert!((s.lr(110) - 1e-4).abs() < 1e-12);
        assert!(
            (s.lr(500) - 1e-4).abs() < 1e-12,
            "stays at the floor past the end"
        );
        let lrs: Vec<f64> = (10..=110).map(|i| s.lr(i)).collect();
        assert!(lrs.windows(2).all(|w| w[1] <= w[0]), "monotone decay");
    }

    #[test]
    fn warmup_longer_than_the_stage_is_clamped() {
        let s = LrSchedule::new(1.0, 1000, 20, 0.0);
        assert_eq!(s.warmup, 10);
        assert!((s.lr(9) - 1.0).abs() < 1e-12);
        assert!(s.lr(19) < 0.05);
    }
}
