//! `replicate.max_mbps`: a byte budget shared by every upload, taken before each
//! chunk is sent, so the average rate stays at the cap whatever the concurrency.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

pub(crate) struct Throttle {
    bytes_per_s: Option<f64>,
    /// When the current burst began and the bytes granted since.
    state: Mutex<(Instant, u64)>,
}

impl Throttle {
    pub(crate) fn new(max_mbps: Option<f64>) -> Throttle {
        Throttle {
            bytes_per_s: max_mbps.map(|m| m * 1e6),
            state: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Waits until `n` more bytes fit under the cap.
    pub(crate) async fn take(&self, n: usize) {
        let Some(rate) = self.bytes_per_s else {
            return;
        };
        let due = {
            let mut s = self.state.lock().await;
            let now = Instant::now();
            // Idle time is not saved up into a burst beyond a second's worth.
            let floor = now - Duration::from_secs(1);
            let next_free = s.0 + Duration::from_secs_f64(s.1 as f64 / rate);
            if next_free < floor {
                *s = (floor, 0);
            }
            s.1 += n as u64;
            s.0 + Duration::from_secs_f64(s.1 as f64 / rate)
        };
        tokio::time::sleep_until(due).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn holds_the_average_rate_at_the_cap() {
        let t = Throttle::new(Some(1.0)); // 1 MB/s
        let start = Instant::now();
        for _ in 0..10 {
            t.take(500_000).await;
        }
        // 5 MB at 1 MB/s, less the one second of credit an idle start may use.
        let took = start.elapsed().as_secs_f64();
        assert!((4.0..=5.01).contains(&took), "{took}");
        let free = Throttle::new(None);
        let start = Instant::now();
        free.take(1 << 30).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
