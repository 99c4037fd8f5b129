//! What a run's ledger adds up to: goodput over the run and the last 24 hours,
//! MTBF, MTTR, the measured save cost, and the Young–Daly checkpoint interval
//! beside the configured one. Pure.

use chrono::{DateTime, Utc};

use super::ledger::RunLedger;
use lavender::goodput::{CheckpointAdvice, GoodputStatus, TrainStepTime};

/// Young–Daly and the configured interval differ by more than this factor: advise.
const ADVISE_BEYOND: f64 = 2.0;

pub(crate) fn figures(
    run: &str,
    ledger: &RunLedger,
    checkpoint_every: u64,
    step_time: Option<TrainStepTime>,
    now: DateTime<Utc>,
) -> GoodputStatus {
    let s = ledger.seconds;
    let counted = ledger.clock();
    let mtbf_s = (ledger.failures > 0).then(|| counted / f64::from(ledger.failures));
    let save_cost_s = (ledger.saves > 0).then(|| ledger.save_stall_s / f64::from(ledger.saves));
    // Seconds per step: the detector's baseline, else what the ledger's samples say.
    let per_step = step_time.as_ref().map(|t| t.baseline_s).or_else(|| {
        let (first, last) = (ledger.samples.first()?, ledger.samples.last()?);
        (last.0 > first.0).then(|| (last.1 - first.1) / (last.0 - first.0) as f64)
    });
    let checkpoint = mtbf_s
        .zip(save_cost_s)
        .filter(|(_, c)| *c > 0.0)
        .map(|(mtbf, c)| young_daly(c, mtbf, checkpoint_every, per_step));
    GoodputStatus {
        run: run.to_string(),
        wall_s: round3(s.wall()),
        seconds: s,
        lost_s: round3(s.badput()),
        goodput: s.goodput().map(round4),
        goodput_24h: ledger.last_24h(now).goodput().map(round4),
        interruptions: ledger.interruptions.clone(),
        mtbf_s: mtbf_s.map(round3),
        mttr_s: (ledger.recoveries > 0)
            .then(|| round3(ledger.recovery_s / f64::from(ledger.recoveries))),
        save_cost_s: save_cost_s.map(round3),
        checkpoint,
        step_time,
        updated_at: lavender::time::rfc3339_z(ledger.counted_until.unwrap_or(now)),
    }
}

/// √(2 · C · MTBF) beside `checkpoint_every` steps of `per_step` seconds each.
fn young_daly(
    cost_s: f64,
    mtbf_s: f64,
    every_steps: u64,
    per_step: Option<f64>,
) -> CheckpointAdvice {
    let yd = (2.0 * cost_s * mtbf_s).sqrt();
    let per_step = per_step.filter(|p| *p > 0.0);
    let every_s = per_step.map(|p| every_steps as f64 * p);
    let yd_steps = per_step.map(|p| ((yd / p).round() as u64).max(1));
    let advice = every_s
        .zip(yd_steps)
        .filter(|(every, _)| every / yd > ADVISE_BEYOND || yd / every > ADVISE_BEYOND)
        .map(|(every, steps)| {
            let how = if every > yd { "more" } else { "less" };
            format!(
                "checkpoint {how} often: every {steps} steps ({}) rather than {every_steps} ({}) \
                 fits this run's save cost {cost_s:.2} s and MTBF {} (Young–Daly)",
                minutes(yd),
                minutes(every),
                minutes(mtbf_s)
            )
        });
    CheckpointAdvice {
        every_steps,
        every_s: every_s.map(round3),
        young_daly_s: round3(yd),
        young_daly_steps: yd_steps,
        advice,
    }
}

/// "42 s", "12 min", "3.5 h".
fn minutes(s: f64) -> String {
    if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 5400.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::goodput::Bucket;

    fn now() -> DateTime<Utc> {
        lavender::time::parse_rfc3339("2026-12-01T00:00:00Z").unwrap()
    }

    #[test]
    fn young_daly_advises_only_beyond_twice_apart() {
        // C = 10 s, MTBF = 5 h: √(2·10·18000) = 600 s.
        let near = young_daly(10.0, 18_000.0, 500, Some(1.0));
        assert_eq!(near.young_daly_s, 600.0);
        assert_eq!(near.young_daly_steps, Some(600));
        assert_eq!(near.advice, None);
        let far = young_daly(10.0, 18_000.0, 5000, Some(1.0));
        assert_eq!(
            far.advice.as_deref(),
            Some(
                "checkpoint more often: every 600 steps (10 min) rather than 5000 (83 min) \
                 fits this run's save cost 10.00 s and MTBF 5.0 h (Young–Daly)"
            )
        );
        assert!(
            young_daly(10.0, 18_000.0, 100, Some(1.0))
                .advice
                .unwrap()
                .starts_with("checkpoint less often")
        );
        // No step time yet: the interval in seconds alone, no advice.
        assert_eq!(young_daly(10.0, 18_000.0, 100, None).advice, None);
    }

    #[test]
    fn mtbf_mttr_and_goodput_come_from_the_ledger() {
        let mut l = RunLedger::default();
        l.seconds.add(Bucket::Productive, 900.0);
        l.seconds.add(Bucket::Rework, 100.0);
        l.seconds.add(Bucket::Stopped, 1000.0);
        l.failures = 2;
        l.recoveries = 2;
        l.recovery_s = 60.0;
        l.saves = 4;
        l.save_stall_s = 2.0;
        let f = figures("run-a", &l, 100, None, now());
        assert_eq!(f.wall_s, 2000.0);
        assert_eq!(f.lost_s, 100.0);
        assert_eq!(f.goodput, Some(0.9));
        assert_eq!(f.mtbf_s, Some(500.0));
        assert_eq!(f.mttr_s, Some(30.0));
        assert_eq!(f.save_cost_s, Some(0.5));
        assert_eq!(f.checkpoint.unwrap().young_daly_s, 22.361);
    }
}
