//! How fast the data root's filesystem fills: the free bytes of the disk readings
//! over the last hour (net of what retention frees), projected to the moment none
//! are left. `disk.time_to_full_s` in the status; `None` while space is not shrinking.

use std::time::{Duration, Instant};

/// The window a rate is measured over: long enough to span several saves and their
/// retention, short enough to follow a change of pace.
pub const WINDOW: Duration = Duration::from_secs(3600);

/// The first and the latest reading of the window: (when, bytes free).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DiskTrend {
    start: Option<(Instant, u64)>,
    last: Option<(Instant, u64)>,
}

impl DiskTrend {
    /// The trend after a new reading `avail` at `at`: a window older than [`WINDOW`]
    /// starts again from its last reading.
    pub fn after(self, at: Instant, avail: Option<u64>) -> DiskTrend {
        let Some(avail) = avail else { return self };
        let start = match (self.start, self.last) {
            (Some((t, _)), Some(last)) if at.duration_since(t) > WINDOW => Some(last),
            (Some(start), _) => Some(start),
            _ => Some((at, avail)),
        };
        DiskTrend {
            start,
            last: Some((at, avail)),
        }
    }

    /// Seconds until no byte is free at the window's net rate; `None` without two
    /// readings or while free space is not shrinking.
    pub fn time_to_full_s(&self) -> Option<u64> {
        let ((t0, a0), (t1, a1)) = (self.start?, self.last?);
        let secs = t1.duration_since(t0).as_secs_f64();
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
        assert_eq!(t.after(at(40), None), t);
        // Past the window, it starts again from the last reading.
        let t = t.after(at(4_000), Some(1_100));
        assert_eq!(t.time_to_full_s(), Some(1_100 * 3_970 / 100));
    }
}
