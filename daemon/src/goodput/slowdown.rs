//! A run that got slower: each stage's step time against its own baseline. Pure,
//! fed with the worker's training heartbeats (their own timestamps), so a table
//! test replays a run.
//!
//! A sample is the time per step between two `training` heartbeats of one worker
//! in a row; a heartbeat in any other phase (evaluating, saving, loading) breaks
//! the pair, so evaluations and saves stay out. The current step time is the
//! median of the last [`WINDOW`] samples; the baseline the median of up to
//! [`BASELINE`] samples before them, which takes no sample while the run is
//! slower than `factor` × it (a slowdown never becomes the baseline).

use std::collections::VecDeque;

use lavender::config::Slowdown;
use lavender::goodput::TrainStepTime;

/// Samples in the current step time.
pub(crate) const WINDOW: usize = 8;
/// Samples the baseline holds, and needs before anything is judged.
const BASELINE: usize = 256;
const BASELINE_MIN: usize = 8;

/// What the detector says about a heartbeat.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Slower than `factor` × the baseline for `for_s`: alert.
    Slow {
        stage: String,
        baseline_s: f64,
        current_s: f64,
        for_s: f64,
    },
    /// Back within `factor` × the baseline after an alert.
    Recovered {
        stage: String,
        baseline_s: f64,
        current_s: f64,
    },
    /// Slower than `factor` × the baseline, since now: what the daemon sees of the
    /// cause is read from here.
    Suspect,
}

#[derive(Debug, Clone)]
pub(crate) struct Detector {
    limits: Slowdown,
    stage: Option<String>,
    /// The previous training heartbeat: (worker pid, step, time in seconds).
    last: Option<(u32, u64, f64)>,
    recent: VecDeque<f64>,
    baseline: VecDeque<f64>,
    /// When the step time went above the limit (heartbeat time), and whether the
    /// alert was raised.
    slow_since: Option<f64>,
    alerted: bool,
}

impl Detector {
    pub(crate) fn new(limits: Slowdown) -> Detector {
        Detector {
            limits,
            stage: None,
            last: None,
            recent: VecDeque::new(),
            baseline: VecDeque::new(),
            slow_since: None,
            alerted: false,
        }
    }

    /// A heartbeat of the running worker: `training` or not, its stage, step and
    /// time (seconds on the worker's clock).
    pub(crate) fn beat(
        &mut self,
        pid: u32,
        training: bool,
        stage: &str,
        step: u64,
        at: f64,
    ) -> Option<Verdict> {
        if self.stage.as_deref() != Some(stage) {
            // A new stage has a baseline of its own.
            *self = Detector::new(self.limits);
            self.stage = Some(stage.to_string());
        }
        if !training {
            self.last = None;
            return None;
        }
        let last = self.last.replace((pid, step, at));
        let (p0, s0, t0) = last?;
        if p0 != pid || step <= s0 || at <= t0 {
            return None;
        }
        self.sample((at - t0) / (step - s0) as f64);
        self.judge(at)
    }

    fn sample(&mut self, per_step: f64) {
        self.recent.push_back(per_step);
        if self.recent.len() > WINDOW {
            let old = self.recent.pop_front().unwrap_or(per_step);
            if self.slow_since.is_none() {
                self.baseline.push_back(old);
                if self.baseline.len() > BASELINE {
                    self.baseline.pop_front();
                }
            }
        }
    }

    fn judge(&mut self, at: f64) -> Option<Verdict> {
        let now = self.now()?;
        let stage = self.stage.clone().unwrap_or_default();
        if now.current_s > self.limits.factor * now.baseline_s {
            let since = *self.slow_since.get_or_insert(at);
            if since == at {
                return Some(Verdict::Suspect);
            }
            if !self.alerted && at - since >= self.limits.for_s {
                self.alerted = true;
                return Some(Verdict::Slow {
                    stage,
                    baseline_s: now.baseline_s,
                    current_s: now.current_s,
                    for_s: at - since,
                });
            }
            None
        } else {
            self.slow_since = None;
            if std::mem::take(&mut self.alerted) {
                return Some(Verdict::Recovered {
                    stage,
                    baseline_s: now.baseline_s,
                    current_s: now.current_s,
                });
            }
            None
        }
    }

    /// The current step time against the baseline, once both are known.
    pub(crate) fn now(&self) -> Option<TrainStepTime> {
        if self.recent.len() < WINDOW || self.baseline.len() < BASELINE_MIN {
            return None;
        }
        Some(TrainStepTime {
            stage: self.stage.clone().unwrap_or_default(),
            baseline_s: median(&self.baseline),
            current_s: median(&self.recent),
            slow: self.alerted,
        })
    }
}

fn median(xs: &VecDeque<f64>) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Slowdown {
        Slowdown {
            factor: 1.3,
            for_s: 10.0,
        }
    }

    /// Steps of `per_step` seconds from `step` at `t`, a heartbeat after each;
    /// the verdicts, and where it ended.
    fn run(d: &mut Detector, step: &mut u64, t: &mut f64, n: u64, per_step: f64) -> Vec<Verdict> {
        (0..n)
            .filter_map(|_| {
                *step += 1;
                *t += per_step;
                d.beat(7, true, "pretrain", *step, *t)
            })
            .collect()
    }

    #[test]
    fn half_again_as_slow_for_long_enough_alerts_once_then_recovers() {
        let mut d = Detector::new(limits());
        let (mut step, mut t) = (0, 0.0);
        assert!(run(&mut d, &mut step, &mut t, 40, 1.0).is_empty());
        let slow = run(&mut d, &mut step, &mut t, 30, 1.5);
        assert_eq!(slow[0], Verdict::Suspect);
        let alert = slow
            .iter()
            .find(|v| matches!(v, Verdict::Slow { .. }))
            .expect("an alert");
        let Verdict::Slow {
            baseline_s,
            current_s,
            for_s,
            ..
        } = alert
        else {
            unreachable!()
        };
        assert_eq!((*baseline_s, *current_s), (1.0, 1.5));
        assert!(*for_s >= 10.0 && *for_s < 12.0, "{for_s}");
        assert_eq!(
            slow.iter()
                .filter(|v| matches!(v, Verdict::Slow { .. }))
                .count(),
            1
        );
        assert!(d.now().unwrap().slow);
        // The slow steps did not become the baseline.
        let back = run(&mut d, &mut step, &mut t, 10, 1.0);
        assert!(
            matches!(back.as_slice(), [Verdict::Recovered { baseline_s, .. }] if *baseline_s == 1.0),
            "{back:?}"
        );
        assert!(!d.now().unwrap().slow);
    }

    #[test]
    fn a_steady_run_with_saves_and_noise_raises_nothing() {
        let mut d = Detector::new(limits());
        let (mut step, mut t) = (0, 0.0);
        for i in 0..200 {
            let jitter = if i % 7 == 0 { 1.25 } else { 1.0 };
            let v = run(&mut d, &mut step, &mut t, 1, jitter);
            assert!(v.is_empty(), "{v:?} at {i}");
            if i % 20 == 0 {
                // A save: 30 s in `saving`, left out.
                t += 30.0;
                assert_eq!(d.beat(7, false, "pretrain", step, t), None);
            }
        }
        // A short slow spell shorter than for_s: suspected, not alerted.
        let v = run(&mut d, &mut step, &mut t, 6, 1.6);
        assert!(
            !v.iter().any(|v| matches!(v, Verdict::Slow { .. })),
            "{v:?}"
        );
    }

    #[test]
    fn a_new_stage_learns_its_own_baseline() {
        let mut d = Detector::new(limits());
        let (mut step, mut t) = (0, 0.0);
        run(&mut d, &mut step, &mut t, 40, 1.0);
        // SFT steps take twice as long: no slowdown, a new baseline.
        let mut v = Vec::new();
        for _ in 0..40 {
            step += 1;
            t += 2.0;
            v.extend(d.beat(7, true, "sft", step, t));
        }
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(d.now().unwrap().baseline_s, 2.0);
    }
}
