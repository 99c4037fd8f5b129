//! At most `max` pushes per channel in any window of `window` (a sliding window).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

pub(super) struct RateLimit {
    max: usize,
    window: Duration,
    sent: VecDeque<Instant>,
}

impl RateLimit {
    pub fn new(max: u32, window: Duration) -> RateLimit {
        RateLimit {
            max: max.max(1) as usize,
            window,
            sent: VecDeque::new(),
        }
    }

    /// How long until the next push may go; `None` = now.
    pub fn wait(&mut self, now: Instant) -> Option<Duration> {
        while self
            .sent
            .front()
            .is_some_and(|&t| now.duration_since(t) >= self.window)
        {
            self.sent.pop_front();
        }
        if self.sent.len() < self.max {
            None
        } else {
            self.sent
                .front()
                .map(|&oldest| (oldest + self.window).saturating_duration_since(now))
        }
    }

    pub fn record(&mut self, now: Instant) {
        self.sent.push_back(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut r = RateLimit::new(2, ms(100));
        assert_eq!(r.wait(t0), None);
        r.record(t0);
        assert_eq!(r.wait(t0 + ms(10)), None);
        r.record(t0 + ms(10));
        assert_eq!(r.wait(t0 + ms(20)), Some(ms(80)));
        assert_eq!(r.wait(t0 + ms(100)), None);
        r.record(t0 + ms(100));
        assert_eq!(r.wait(t0 + ms(105)), Some(ms(5)));
    }
}
