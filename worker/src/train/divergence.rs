//! Divergence: a non-finite loss or gradient norm, or a loss above
//! `training.spike.factor` × the median of the last `training.spike.window` steps
//! of the stage (from its second step on) for `training.spike.patience` steps in a
//! row. The worker then stops with
//! `diverged` and saves nothing (lavenderd rolls back to a checkpoint saved before
//! the spike began, `since_step`).
//!
//! Pure: fed each step's `(step, loss, grad_norm)` in step order, as late as the
//! loop reads them from the device, but always before a save (a diverged state is
//! never saved). Its state goes into every checkpoint, so a resumed run judges the
//! steps after it exactly as the run without the stop would have.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// `training.spike`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpikeRule {
    pub factor: f64,
    pub window: usize,
    pub patience: u32,
}

impl From<&lavender::config::SpikeConfig> for SpikeRule {
    fn from(c: &lavender::config::SpikeConfig) -> SpikeRule {
        SpikeRule {
            factor: c.factor,
            window: c.window.max(1) as usize,
            patience: c.patience.max(1),
        }
    }
}

/// The divergence found: where, since when, and one line saying what.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// The step at which it was detected.
    pub step: u64,
    /// The first step of the divergence (of the spike, or the non-finite step).
    pub since_step: u64,
    pub message: String,
}

/// What a checkpoint keeps of the detector (`divergence` in trainer_state.json).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DetectorState {
    /// The window's losses, oldest first.
    pub recent: Vec<f64>,
    /// The first step of a spike under way, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spike_since: Option<u64>,
    /// How many steps in a row the spike has lasted.
    #[serde(default)]
    pub spike_steps: u32,
}

#[derive(Debug, Clone)]
pub struct Detector {
    rule: SpikeRule,
    /// Losses of the stage's last `window` steps.
    recent: VecDeque<f64>,
    spike_since: Option<u64>,
    spike_steps: u32,
    /// The last step observed (or the step the detector was restored at).
    seen: u64,
}

impl Detector {
    /// A detector with no history, at `step`.
    pub fn new(rule: SpikeRule, step: u64) -> Detector {
        Detector {
            rule,
            recent: VecDeque::with_capacity(rule.window),
            spike_since: None,
            spike_steps: 0,
            seen: step,
        }
    }

    /// A detector continuing `state`, saved at `step`.
    pub fn restore(rule: SpikeRule, state: DetectorState, step: u64) -> Detector {
        let mut d = Detector::new(rule, step);
        let skip = state.recent.len().saturating_sub(rule.window);
        d.recent.extend(state.recent.into_iter().skip(skip));
        d.spike_since = state.spike_since;
        d.spike_steps = state.spike_steps;
        d
    }

    pub fn state(&self) -> DetectorState {
        DetectorState {
            recent: self.recent.iter().copied().collect(),
            spike_since: self.spike_since,
            spike_steps: self.spike_steps,
        }
    }

    /// A new stage measures another loss: its history starts afresh.
    pub fn reset(&mut self) {
        self.recent.clear();
        self.spike_since = None;
        self.spike_steps = 0;
    }

    /// The last step observed: a save of a later step would save a state the
    /// detector has not judged.
    pub fn seen_through(&self) -> u64 {
        self.seen
    }

    /// A step with nothing to judge (fp16 skipped it: its gradient overflowed and
    /// the loss scale shrinks); judged through it all the same.
    pub fn pass(&mut self, step: u64) {
        self.seen = step;
    }

    /// The median of the window; none before the stage's first step.
    fn median(&self) -> Option<f64> {
        if self.recent.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = self.recent.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    /// Judges step `step`; `Some` once the run has diverged.
    pub fn observe(&mut self, step: u64, loss: f64, grad_norm: f64) -> Option<Divergence> {
        self.seen = step;
        for (what, value) in [("loss", loss), ("gradient norm", grad_norm)] {
            if !value.is_finite() {
                return Some(Divergence {
                    step,
                    since_step: self.spike_since.unwrap_or(step),
                    message: format!("the {what} became {value} at step {step}"),
                });
            }
        }
        let judged = self
            .median()
            .map(|median| (median, loss > self.rule.factor * median));
        if self.recent.len() == self.rule.window {
            self.recent.pop_front();
        }
        self.recent.push_back(loss);
        let Some((median, true)) = judged else {
            self.spike_since = None;
            self.spike_steps = 0;
            return None;
        };
        let since = *self.spike_since.get_or_insert(step);
        self.spike_steps += 1;
        (self.spike_steps >= self.rule.patience).then(|| Divergence {
            step,
            since_step: since,
            message: format!(
                "loss {loss:.4} > {} × median {median:.4} of the previous {} step(s) for {} step(s) in a row (since step {since}) at step {step}",
                self.rule.factor,
                self.recent.len() - 1,
                self.spike_steps
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: SpikeRule = SpikeRule {
        factor: 3.0,
        window: 20,
        patience: 2,
    };

    /// Feeds `losses` from step `from + 1` on; the first divergence, if any.
    fn feed(d: &mut Detector, from: u64, losses: &[f64]) -> Option<Divergence> {
        losses
            .iter()
            .enumerate()
            .find_map(|(i, &l)| d.observe(from + 1 + i as u64, l, 1.0))
    }

    #[test]
    fn a_non_finite_loss_or_gradient_diverges_at_once() {
        let mut d = Detector::new(RULE, 0);
        let div = d.observe(1, f64::NAN, 1.0).unwrap();
        assert_eq!((div.step, div.since_step), (1, 1));
        assert!(div.message.contains("loss became NaN at step 1"), "{div:?}");
        let mut d = Detector::new(RULE, 40);
        assert_eq!(feed(&mut d, 40, &[2.0, 2.1]), None);
        let div = d.observe(43, 2.0, f64::INFINITY).unwrap();
        assert_eq!((div.step, div.since_step), (43, 43));
        assert!(div.message.contains("gradient norm became inf"), "{div:?}");
    }

    #[test]
    fn a_spike_diverges_after_patience_steps_and_names_its_first_step() {
        let mut d = Detector::new(RULE, 0);
        let calm = [2.0, 2.2, 1.9, 2.1, 2.0, 1.8, 2.05, 2.1, 1.95, 2.0];
        assert_eq!(feed(&mut d, 0, &calm), None);
        // One step above 3 × the median (2.0) is not yet a divergence.
        assert_eq!(d.observe(11, 6.5, 1.0), None);
        let div = d.observe(12, 7.0, 1.0).unwrap();
        assert_eq!((div.step, div.since_step), (12, 11));
        assert!(
            div.message.contains("> 3 × median 2.0000") && div.message.contains("at step 12"),
            "{}",
            div.message
        );
    }

    #[test]
    fn a_spike_that_ends_before_patience_resets_and_counts_in_the_median() {
        let mut d = Detector::new(RULE, 0);
        assert_eq!(feed(&mut d, 0, &[2.0; 10]), None);
        assert_eq!(d.observe(11, 9.0, 1.0), None);
        assert_eq!(d.observe(12, 2.0, 1.0), None);
        assert_eq!(d.state().spike_since, None);
        assert!(d.state().recent.contains(&9.0));
        // A new spike counts its patience from its own first step.
        assert_eq!(d.observe(13, 9.0, 1.0), None);
        let div = d.observe(14, 9.0, 1.0).unwrap();
        assert_eq!(div.since_step, 13);
        // A NaN during a spike diverges since the spike began.
        let mut d = Detector::new(RULE, 0);
        feed(&mut d, 0, &[2.0; 10]);
        d.observe(11, 9.0, 1.0);
        assert_eq!(d.observe(12, f64::NAN, 1.0).unwrap().since_step, 11);
    }

    #[test]
    fn an_early_blow_up_is_caught_and_a_new_stage_starts_afresh() {
        // Learning fast is no spike; a loss exploding from the second step on is,
        // though the median follows it up (lr far too high).
        let mut d = Detector::new(RULE, 0);
        assert_eq!(feed(&mut d, 0, &[8.0, 4.0, 2.0, 1.0, 1.2, 0.9]), None);
        let mut d = Detector::new(RULE, 0);
        let div = feed(&mut d, 0, &[4.2, 3895.0, 11926.0, 32550.0]).unwrap();
        assert_eq!((div.step, div.since_step), (3, 2));
        // A new stage forgets the old one's losses: its first loss is no spike.
        let mut d = Detector::new(RULE, 0);
        feed(&mut d, 0, &[0.5; 10]);
        d.reset();
        assert_eq!(feed(&mut d, 10, &[4.0, 3.9, 3.8, 3.9, 3.7]), None);
        assert_eq!(d.state().recent.len(), 5);
    }

    #[test]
    fn the_window_keeps_the_last_steps_and_a_restored_detector_judges_the_same() {
        let rule = SpikeRule {
            factor: 2.0,
            window: 12,
            patience: 3,
        };
        let losses: Vec<f64> = (0..40)
            .map(|i| 3.0 - i as f64 * 0.01 + if i % 3 == 0 { 0.05 } else { 0.0 })
            .chain([7.0, 7.5])
            .chain((0..5).map(|_| 8.0))
            .collect();
        let mut straight = Detector::new(rule, 0);
        let expected = feed(&mut straight, 0, &losses);
        assert_eq!(
            expected.as_ref().map(|d| (d.step, d.since_step)),
            Some((43, 41))
        );
        // Stopped after step 41 (mid-spike) and restored from its saved state.
        let mut first = Detector::new(rule, 0);
        assert_eq!(feed(&mut first, 0, &losses[..41]), None);
        assert_eq!(first.state().recent.len(), 12);
        assert_eq!(first.seen_through(), 41);
        let json = serde_json::to_string(&first.state()).unwrap();
        let state: DetectorState = serde_json::from_str(&json).unwrap();
        let mut resumed = Detector::restore(rule, state, 41);
        assert_eq!(feed(&mut resumed, 41, &losses[41..]), expected);
    }
}
