//! Latency percentiles from recorded samples.

use std::time::Duration;

pub struct Latencies {
    sorted_ns: Vec<u64>,
}

impl Latencies {
    pub fn new(mut ns: Vec<u64>) -> Latencies {
        ns.sort_unstable();
        Latencies { sorted_ns: ns }
    }

    pub fn len(&self) -> usize {
        self.sorted_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted_ns.is_empty()
    }

    /// The `q`-quantile (0..=1), nearest rank.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.sorted_ns.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q * self.sorted_ns.len() as f64).ceil() as usize;
        let i = rank.clamp(1, self.sorted_ns.len()) - 1;
        Duration::from_nanos(self.sorted_ns[i])
    }

    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.sorted_ns.last().copied().unwrap_or(0))
    }
}

pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}
