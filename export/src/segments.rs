//! SOURCE's segments: the checkpoints split into equal groups in training order,
//! each segment ending at its last checkpoint's step. Per segment SOURCE takes an
//! average learning rate (`lr_list`) and a step count (`step_size_list`) and
//! multiplies them, then by the terminal-velocity factor 1/(1−momentum) of
//! heavy-ball SGD (Bae et al. 2024, App. D.2): at momentum 0.95 that is 20×, at
//! 0.0 (AdamW) 1×.

use serde::Serialize;

use crate::error::{ExportError, Result};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    /// Exclusive: the previous segment's last step (0 for the first segment).
    pub from_step: u64,
    /// Inclusive: the segment's last checkpoint's step.
    pub to_step: u64,
    /// `step_size_list`'s value.
    pub steps: u64,
    /// `lr_list`'s value: the segment's average learning rate.
    pub lr: f64,
    /// 1/(1−momentum).
    pub factor: f64,
    /// `lr × steps × factor`, computed in that order as SOURCE does.
    pub lr_x_steps: f64,
}

/// 1/(1−β).
pub fn terminal_velocity_factor(momentum: f64) -> f64 {
    1.0 / (1.0 - momentum)
}

/// Checkpoint steps must strictly increase.
pub fn check_order(steps: &[u64]) -> Result<()> {
    for w in steps.windows(2) {
        if w[1] <= w[0] {
            return Err(ExportError::bad_option(
                "CHECKPOINT",
                format!(
                    "checkpoints must be listed in training order, each after the last: step {} follows step {}",
                    w[1], w[0]
                ),
            ));
        }
    }
    Ok(())
}

/// The last step of each of `segments` equal groups of `steps`.
fn boundaries(steps: &[u64], segments: usize) -> Vec<u64> {
    let per = steps.len() / segments;
    (0..segments).map(|l| steps[(l + 1) * per - 1]).collect()
}

/// SOURCE's `lr_list` (average rate per segment) and `step_size_list` (steps per
/// segment) from every step's rate (`lrs[i]` is step `i + 1`'s).
pub fn per_segment(steps: &[u64], segments: usize, lrs: &[f64]) -> Result<(Vec<f64>, Vec<u64>)> {
    let mut prev = 0u64;
    let (mut lr_list, mut sizes) = (Vec::new(), Vec::new());
    for end in boundaries(steps, segments) {
        if end as usize > lrs.len() {
            return Err(ExportError::bad_option(
                "--step-lrs",
                format!(
                    "has {} learning rates, but the checkpoint at step {end} needs one per step up to {end}",
                    lrs.len()
                ),
            ));
        }
        let n = end - prev;
        let sum: f64 = lrs[prev as usize..end as usize].iter().sum();
        lr_list.push(if n == 0 { 0.0 } else { sum / n as f64 });
        sizes.push(n);
        prev = end;
    }
    Ok((lr_list, sizes))
}

/// Each segment's span and lr×steps as SOURCE computes it from `lr_list` and
/// `step_size_list`.
pub fn details(
    steps: &[u64],
    segments: usize,
    lr_list: &[f64],
    step_size_list: &[u64],
    factor: f64,
) -> Vec<Segment> {
    let mut prev = 0;
    boundaries(steps, segments)
        .into_iter()
        .zip(lr_list.iter().zip(step_size_list))
        .map(|(end, (&lr, &n))| {
            let s = Segment {
                from_step: prev,
                to_step: end,
                steps: n,
                lr,
                factor,
                lr_x_steps: lr * n as f64 * factor,
            };
            prev = end;
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_average_the_rates_of_their_steps() {
        let lrs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let (lr_list, sizes) = per_segment(&[2, 6], 2, &lrs).unwrap();
        assert_eq!(
            (lr_list.clone(), sizes.clone()),
            (vec![1.5, 4.5], vec![2, 4])
        );
        let segs = details(&[2, 6], 2, &lr_list, &sizes, 1.0);
        assert_eq!((segs[0].from_step, segs[0].to_step), (0, 2));
        assert_eq!((segs[1].lr_x_steps, segs[0].lr_x_steps), (18.0, 3.0));
        let scaled = details(&[2, 6], 2, &lr_list, &sizes, terminal_velocity_factor(0.5));
        assert_eq!(scaled[1].lr_x_steps, 36.0);
    }

    #[test]
    fn several_checkpoints_per_segment_end_at_the_last_one() {
        let lrs = [1.0; 8];
        let (lr_list, sizes) = per_segment(&[2, 4, 6, 8], 2, &lrs).unwrap();
        assert_eq!((lr_list, sizes), (vec![1.0, 1.0], vec![4, 4]));
    }

    #[test]
    fn out_of_order_or_short_lists_are_errors() {
        let err = check_order(&[4, 2]).unwrap_err().to_string();
        assert!(err.contains("step 2 follows step 4"), "{err}");
        let err = per_segment(&[5], 1, &[1.0; 4]).unwrap_err().to_string();
        assert!(err.contains("--step-lrs: has 4 learning rates"), "{err}");
    }
}
