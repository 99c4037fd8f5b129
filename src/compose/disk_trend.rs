//! How fast the data root's filesystem fills: the free bytes of the disk readings
//! over the last hour (net of what retention frees), projected to the moment none
//! are left. `disk.time_to_full_s` in the status; `None` while space is not shrinking.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The window a rate is measured over: long enough to span several saves and their
/// retention, short enough to follow a change of pace.
pub const WINDOW: Duration = Duration::from_secs(3600);

/// Readings are kept at least this far apart (the latest aside): the window's start
/// is known to within it, and a window holds about 60 of them.
const SPACING: Duration = Duration::from_secs(60);

/// The readings of the last [`WINDOW`]: (when, bytes free). The window slides: the
/// rate is always the one over the last hour, never over the few seconds after a
/// reset, which a save or a retention pass would swing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiskTrend {
    /// Oldest first, [`SPACING`] apart, none older than [`WINDOW`] before `last`.
    kept: VecDeque<(Instant, u64)>,
    last: Option<(Instant, u64)>,
}

impl DiskTrend {
    /// The trend after a new reading `avail` at `at`: readings older than [`WINDOW`]
    /// drop out.
    pub fn after(mut self, at: Instant, avail: Option<u64>) -> DiskTrend {
        let Some(avail) = avail else { return self };
        if self
            .kept
            .back()
            .is_none_or(|&(t, _)| at.saturating_duration_since(t) >= SPACING)
        {
            self.kept.push_back((at, avail));
        }
        while self
            .kept
            .front()
            .is_some_and(|&(t, _)| at.saturating_duration_since(t) > WINDOW)
        {
            self.kept.pop_front();
        }
        self.last = Some((at, avail));
        self
    }

    /// Seconds until no byte is free at the window's net rate; `None` without two
    /// readings or while free space is not shrinking.
    pub fn time_to_full_s(&self) -> Option<u64> {
        let ((t0, a0), (t1, a1)) = (*self.kept.front()?, self.last?);
        let secs = t1.saturating_duration_since(t0).as_secs_f64();
        let used = a0.checked_sub(a1).filter(|u| *u > 0)? as f64;
        if secs <= 0.0 {
            return None;
        }
        Some((a1 as f64 / (used / secs)).round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shrinking_disk_is_projected_and_a_steady_one_is_not() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let t = DiskTrend::default().after(at(0), Some(1_000));
        assert_eq!(t.time_to_full_s(), None, "one reading is no rate");
        // 100 bytes in 10 s: 10 B/s, 900 left → 90 s.
        let t = t.after(at(10), Some(900));
        assert_eq!(t.time_to_full_s(), Some(90));
        // Retention gave some back: the net rate over the window still counts.
        let t = t.after(at(20), Some(950));
        assert_eq!(t.time_to_full_s(), Some(380));
        let t = t.after(at(30), Some(1_200));
        assert_eq!(t.time_to_full_s(), None, "more free than at the start");
        // An unreadable disk keeps what was known.
        assert_eq!(t.clone().after(at(40), None), t);
        // Past the window the readings before it are gone: one reading is no rate.
        let t = t.after(at(4_000), Some(1_100));
        assert_eq!(t.time_to_full_s(), None);
        let t = t.after(at(4_010), Some(1_000));
        assert_eq!(t.time_to_full_s(), Some(100));
    }

    /// A save every 10 minutes takes 6,000 bytes at once (a net 10 B/s), read every
    /// 10 s: across the hour boundary and after it, the projection stays near the
    /// net rate's, a save just after the hour included.
    #[test]
    fn the_window_slides_so_the_projection_stays_steady_across_the_hour() {
        let t0 = Instant::now();
        let start_free = 1_000_000u64;
        let mut trend = DiskTrend::default();
        let mut seen = Vec::new();
        for s in (0..=3 * 3_600u64).step_by(10) {
            // The save of minute 10k lands between two readings.
            let free = start_free - 6_000 * (s / 600);
            trend = trend.after(t0 + Duration::from_secs(s), Some(free));
            if s > 3_600 {
                let steady = free as f64 / 10.0;
                let got = trend
                    .time_to_full_s()
                    .unwrap_or_else(|| panic!("no projection at {s} s"))
                    as f64;
                seen.push((s, got / steady));
            }
        }
        let (lo, hi) = seen
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), &(_, r)| (lo.min(r), hi.max(r)));
        assert!(
            lo > 0.8 && hi < 1.25,
            "projection / steady ranged {lo:.2}..{hi:.2}"
        );
        assert!(trend.kept.len() <= 61, "{} readings kept", trend.kept.len());
    }
}
