//! A backoff schedule: the wait before retry N is the N-th value, and the last value
//! repeats for every retry after it. Restarts of a crashed worker, retries of a
//! failed push and reads again after a storage error ([`Backoff::storage`]) all wait
//! this way.

use std::time::Duration;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backoff(Vec<Duration>);

impl Backoff {
    pub fn new(waits: Vec<Duration>) -> Backoff {
        Backoff(waits)
    }

    /// From a config list of seconds; fractions are kept (tests use milliseconds), and
    /// a value that is not a duration (negative, NaN) waits nothing.
    pub fn from_secs(secs: &[f64]) -> Backoff {
        Backoff(
            secs.iter()
                .map(|s| Duration::try_from_secs_f64(*s).unwrap_or_default())
                .collect(),
        )
    }

    /// Between two reads of a checkpoint the storage could not read (EIO, ESTALE,
    /// EACCES): 1, 2, 5, 10, 30, then every 60 s. The checkpoints room and a
    /// relaunch's check wait alike.
    pub fn storage() -> Backoff {
        Backoff::from_secs(&[1.0, 2.0, 5.0, 10.0, 30.0, 60.0])
    }

    /// The wait before retry `n` (1-based; 0 counts as 1). An empty schedule waits nothing.
    pub fn before(&self, n: u32) -> Duration {
        let i = (n.max(1) - 1) as usize;
        self.0.get(i).or(self.0.last()).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_value_repeats() {
        let b = Backoff::from_secs(&[0.05, 0.25]);
        assert_eq!(b.before(0), Duration::from_millis(50));
        assert_eq!(b.before(1), Duration::from_millis(50));
        assert_eq!(b.before(2), Duration::from_millis(250));
        assert_eq!(b.before(9), Duration::from_millis(250));
        assert_eq!(Backoff::default().before(3), Duration::ZERO);
        assert_eq!(Backoff::from_secs(&[-1.0]).before(1), Duration::ZERO);
    }
}
