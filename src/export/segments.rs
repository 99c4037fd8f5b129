//! lr×steps per segment of consecutive checkpoints: what unrolling-based
//! attribution (SOURCE) multiplies each segment's gradient statistics by.
//!
//! With momentum β, SGD's steady-state step is 1/(1−β) times the raw one (the
//! terminal velocity, Bae et al. 2024, App. D.2): at β = 0.95 that is 20×.

use serde::Serialize;

use super::{ExportError, Result};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    /// Exclusive: the previous checkpoint's step (0 for the first segment).
    pub from_step: u64,
    /// Inclusive: this checkpoint's step.
    pub to_step: u64,
    pub steps: u64,
    /// Σ lr over the segment's steps: lr×steps with no momentum.
    pub lr_sum: f64,
    /// 1/(1−β) when the terminal-velocity factor is applied, else 1.
    pub factor: f64,
    /// `lr_sum × factor`.
    pub lr_x_steps: f64,
}

/// 1/(1−β).
pub fn terminal_velocity_factor(momentum: f64) -> f64 {
    1.0 / (1.0 - momentum)
}

/// Segments ending at each of `steps` (in training order), from per-step learning
/// rates (`lrs[i]` is step `i + 1`'s), each scaled by `factor`.
pub fn lr_x_steps(steps: &[u64], lrs: &[f64], factor: f64) -> Result<Vec<Segment>> {
    let mut out = Vec::with_capacity(steps.len());
    let mut prev = 0u64;
    for (i, &step) in steps.iter().enumerate() {
        if i > 0 && step <= prev {
            return Err(ExportError::bad_option(
                "CHECKPOINT",
                format!(
                    "checkpoints must be listed in training order, each after the last: step {step} follows step {prev}"
                ),
            ));
        }
        if step as usize > lrs.len() {
            return Err(ExportError::bad_option(
                "--lr-list",
                format!(
                    "has {} learning rates, but the checkpoint at step {step} needs one per step up to {step}",
                    lrs.len()
                ),
            ));
        }
        let lr_sum: f64 = lrs[prev as usize..step as usize].iter().sum();
        out.push(Segment {
            from_step: prev,
            to_step: step,
            steps: step - prev,
            lr_sum,
            factor,
            lr_x_steps: lr_sum * factor,
        });
        prev = step;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_sum_the_steps_between_checkpoints() {
        let lrs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let segs = lr_x_steps(&[2, 6], &lrs, 1.0).unwrap();
        assert_eq!(segs.len(), 2);
        assert_eq!(
            (segs[0].from_step, segs[0].to_step, segs[0].steps),
            (0, 2, 2)
        );
        assert_eq!(segs[0].lr_sum, 3.0);
        assert_eq!(segs[1].lr_sum, 18.0);
        let scaled = lr_x_steps(&[2, 6], &lrs, terminal_velocity_factor(0.5)).unwrap();
        assert_eq!(scaled[1].lr_x_steps, 36.0);
    }

    #[test]
    fn out_of_order_or_short_lists_are_errors() {
        let err = lr_x_steps(&[4, 2], &[1.0; 4], 1.0).unwrap_err().to_string();
        assert!(err.contains("step 2 follows step 4"), "{err}");
        let err = lr_x_steps(&[5], &[1.0; 4], 1.0).unwrap_err().to_string();
        assert!(err.contains("--lr-list: has 4 learning rates"), "{err}");
    }
}
