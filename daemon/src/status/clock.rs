//! The clocks hang allowances are measured on. A reading holds three clocks at one
//! instant: the monotonic clock (stops while the machine is suspended), the boot
//! clock (keeps counting through a suspend) and the wall clock (can be set, stepped
//! by NTP, or jump on wake). The watch on a worker (`hang_clock.rs`) takes readings
//! from a [`Clock`] passed in, so unit tests drive a suspend or a wall-clock jump.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The three clocks read together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockReading {
    /// Since an arbitrary origin; does not count a suspend.
    pub monotonic: Duration,
    /// Since the same kind of origin; counts a suspend (where the system cannot
    /// tell, equal to `monotonic`).
    pub boottime: Duration,
    pub wall: DateTime<Utc>,
}

impl ClockReading {
    /// How far the boot clock ran ahead of the monotonic clock: the time the machine
    /// spent suspended since boot.
    pub fn suspended(&self) -> Duration {
        self.boottime.saturating_sub(self.monotonic)
    }
}

/// Where readings come from: [`SystemClock`] in the daemon, a script in tests.
pub trait Clock: Send {
    fn read(&self) -> ClockReading;
}

/// The machine's clocks. Linux: `CLOCK_MONOTONIC` and `CLOCK_BOOTTIME`. macOS:
/// `CLOCK_UPTIME_RAW` (`mach_absolute_time`, stops in sleep) and
/// `CLOCK_MONOTONIC_RAW` (`mach_continuous_time`, counts sleep). Elsewhere the
/// monotonic clock twice: a suspend then shows as a wall-clock jump.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn read(&self) -> ClockReading {
        let (monotonic, boottime) = platform::read();
        ClockReading {
            monotonic,
            boottime,
            wall: lavender::time::now_utc(),
        }
    }
}

mod platform {
    use std::time::Duration;

    use nix::libc;

    /// `clock_gettime(id)`; zero if the clock cannot be read (never on the
    /// platforms below: these ids exist there).
    fn gettime(id: libc::clockid_t) -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call's duration.
        let rc = unsafe { libc::clock_gettime(id, &mut ts) };
        if rc != 0 {
            return Duration::ZERO;
        }
        Duration::new(
            ts.tv_sec.max(0) as u64,
            ts.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn read() -> (Duration, Duration) {
        (
            gettime(libc::CLOCK_MONOTONIC),
            gettime(libc::CLOCK_BOOTTIME),
        )
    }

    #[cfg(target_vendor = "apple")]
    pub(super) fn read() -> (Duration, Duration) {
        (
            gettime(libc::CLOCK_UPTIME_RAW),
            gettime(libc::CLOCK_MONOTONIC_RAW),
        )
    }

    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    pub(super) fn read() -> (Duration, Duration) {
        let mono = gettime(libc::CLOCK_MONOTONIC);
        (mono, mono)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clocks_run_forward_and_the_boot_clock_is_not_behind() {
        let a = SystemClock.read();
        std::thread::sleep(Duration::from_millis(5));
        let b = SystemClock.read();
        assert!(b.monotonic > a.monotonic, "{a:?} {b:?}");
        assert!(b.boottime > a.boottime, "{a:?} {b:?}");
        assert!(a.boottime >= a.monotonic, "{a:?}");
        assert!(a.monotonic > Duration::ZERO);
    }
}
