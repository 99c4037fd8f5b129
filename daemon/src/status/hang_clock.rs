//! Hang allowances measured on the monotonic clock. The wall clock dates what a
//! worker said (`stall::Said`); the daemon notes, on the monotonic clock, when it
//! first saw each new thing said, and measures the allowance from there. A suspend
//! of the machine (the boot clock ran ahead of the monotonic clock) or a jump of
//! the wall clock grants the allowance afresh: a machine that slept did not hang.
//! Fed a reading of a [`Clock`](super::clock::Clock) at every look; pure otherwise.

use std::time::Duration;

use super::clock::ClockReading;
use lavender::stall::Said;

/// Less than this between two looks is the clocks' own drift, not a suspend or a
/// jump (looks are at most seconds apart; NTP slews at most 0.5 ms/s).
const JUMP: Duration = Duration::from_secs(1);

/// Why every allowance was granted afresh at a look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClockRestart {
    /// The machine was suspended this long since the last look.
    Slept(Duration),
    /// The wall clock moved this many seconds more (or, negative, less) than the
    /// monotonic clock since the last look.
    WallJumped(f64),
}

impl std::fmt::Display for ClockRestart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockRestart::Slept(d) => {
                write!(
                    f,
                    "the machine slept {}; hang clocks restarted",
                    lavender::time::duration(*d)
                )
            }
            ClockRestart::WallJumped(s) => {
                let how_far = lavender::time::duration(Duration::from_secs_f64(s.abs()));
                let way = if *s >= 0.0 { "ahead" } else { "back" };
                write!(
                    f,
                    "the wall clock jumped {how_far} {way}; hang clocks restarted"
                )
            }
        }
    }
}

/// What a look found: what the worker last said, dated so that its age on the wall
/// clock now is its age on the monotonic clock; and whether the clocks restarted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Look {
    pub said: Option<Said>,
    pub restart: Option<ClockRestart>,
}

/// The daemon's memory of the last thing said and when (monotonic) it saw it.
#[derive(Debug, Clone, Default)]
pub struct HangClock {
    last: Option<ClockReading>,
    /// What was said, and the monotonic instant its allowance counts from.
    current: Option<(Said, Duration)>,
}

impl HangClock {
    /// A look at `now`: `said` is what the worker last said as the files date it
    /// (`stall::said_by`), `None` when no worker is watched.
    pub fn look(&mut self, now: ClockReading, said: Option<Said>) -> Look {
        let prev = self.last.replace(now);
        let restart = prev.and_then(|p| restart_between(&p, &now));
        let Some(said) = said else {
            self.current = None;
            return Look {
                said: None,
                restart: None,
            };
        };
        let from = match self.current {
            Some((seen, from)) if seen == said => from,
            // New: dated by its age on the wall clock, which cannot exceed the
            // monotonic time since the last look (it was not said then).
            _ => {
                let age = (now.wall - said.since).to_std().unwrap_or_default();
                let age = match prev.filter(|_| self.current.is_some()) {
                    Some(p) => age.min(now.monotonic.saturating_sub(p.monotonic)),
                    None => age,
                };
                now.monotonic.saturating_sub(age)
            }
        };
        let from = if restart.is_some() {
            now.monotonic
        } else {
            from
        };
        self.current = Some((said, from));
        let age = now.monotonic.saturating_sub(from);
        Look {
            said: Some(Said {
                since: now.wall - chrono::Duration::from_std(age).unwrap_or_default(),
                ..said
            }),
            restart,
        }
    }
}

/// A suspend, else a wall-clock jump, between two looks.
fn restart_between(prev: &ClockReading, now: &ClockReading) -> Option<ClockRestart> {
    let slept = now.suspended().saturating_sub(prev.suspended());
    if slept >= JUMP {
        return Some(ClockRestart::Slept(slept));
    }
    let mono = now.monotonic.saturating_sub(prev.monotonic).as_secs_f64();
    let wall = (now.wall - prev.wall).as_seconds_f64();
    let jump = wall - mono;
    (jump.abs() >= JUMP.as_secs_f64()).then_some(ClockRestart::WallJumped(jump))
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use lavender::config::{OnStall, StaleAfter, StaleAuto};
    use lavender::heartbeat::WorkerState;

    use super::super::clock::Clock;
    use super::*;
    use lavender::stall::{Allowances, Beat, allowances as of_supervisor, said, watch};

    /// A machine's clocks driven by the test: time passes awake, asleep, or the wall
    /// clock is set.
    struct Machine {
        reading: std::cell::Cell<ClockReading>,
    }

    impl Clock for Machine {
        fn read(&self) -> ClockReading {
            self.reading.get()
        }
    }

    impl Machine {
        fn new() -> Machine {
            Machine {
                reading: std::cell::Cell::new(ClockReading {
                    monotonic: Duration::from_secs(1000),
                    boottime: Duration::from_secs(1000),
                    wall: t(0.0),
                }),
            }
        }

        fn wall(&self) -> DateTime<Utc> {
            self.read().wall
        }

        fn awake(&self, secs: f64) {
            let d = Duration::from_secs_f64(secs);
            let mut r = self.read();
            r.monotonic += d;
            r.boottime += d;
            r.wall += chrono::Duration::from_std(d).unwrap();
            self.reading.set(r);
        }

        /// Suspended: the monotonic clock stands still.
        fn asleep(&self, secs: f64) {
            let d = Duration::from_secs_f64(secs);
            let mut r = self.read();
            r.boottime += d;
            r.wall += chrono::Duration::from_std(d).unwrap();
            self.reading.set(r);
        }

        fn set_wall(&self, secs: f64) {
            let mut r = self.read();
            r.wall += chrono::Duration::milliseconds((secs * 1000.0) as i64);
            self.reading.set(r);
        }
    }

    fn t(s: f64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis((1_800_000_000.0 * 1000.0 + s * 1000.0) as i64).unwrap()
    }

    fn allowances() -> Allowances {
        let supervisor = lavender::config::SupervisorConfig {
            stale_after_s: StaleAfter::Seconds(300.0),
            stale_auto: StaleAuto {
                factor: 5.0,
                floor_s: 2.0,
                ceiling_s: 100.0,
            },
            startup_grace_s: 600,
            loading_grace_s: 1800,
            evaluating_grace_s: 1800,
            saving_grace_s: 1800,
            on_stall: OnStall::Restart,
            data_step_stale_after_s: 1800,
            ..lavender::config::Config::default().supervisor
        };
        of_supervisor(&supervisor, None)
    }

    /// The worker started at `started`, whose heartbeat on disk is `beat`, looked at
    /// now: whether it counts as hung.
    fn hung(
        clock: &mut HangClock,
        machine: &Machine,
        started: DateTime<Utc>,
        beat: Option<Beat>,
    ) -> (bool, Look) {
        let look = clock.look(machine.read(), said(started, beat.as_ref()));
        let overdue = look
            .said
            .and_then(|s| watch(&s, &allowances()))
            .is_some_and(|w| w.overdue(machine.wall()));
        (overdue, look)
    }

    fn beat(at: DateTime<Utc>, state: WorkerState, step: u64) -> Beat {
        Beat { at, state, step }
    }

    #[test]
    fn an_eleven_minute_load_then_starting_is_not_a_hang() {
        let m = Machine::new();
        let mut c = HangClock::default();
        let started = m.wall();
        assert!(!hung(&mut c, &m, started, None).0);
        m.awake(1.0);
        let loading = beat(m.wall(), WorkerState::Loading, 0);
        assert!(!hung(&mut c, &m, started, Some(loading)).0);
        // 11 minutes of loading (allowed 30), looked at every 2 s.
        for _ in 0..330 {
            m.awake(2.0);
            assert!(!hung(&mut c, &m, started, Some(loading)).0);
        }
        // Then `starting`: a fresh start-up allowance (10 min), from that heartbeat.
        let starting = beat(m.wall(), WorkerState::Starting, 0);
        let (overdue, look) = hung(&mut c, &m, started, Some(starting));
        assert!(!overdue);
        assert_eq!(look.said.unwrap().since, m.wall());
        m.awake(599.0);
        assert!(!hung(&mut c, &m, started, Some(starting)).0);
        // Silence past the start-up allowance is a hang.
        m.awake(1.0);
        assert!(hung(&mut c, &m, started, Some(starting)).0);
    }

    #[test]
    fn a_one_hour_suspend_is_not_a_hang_and_a_real_hang_after_the_wake_is() {
        let m = Machine::new();
        let mut c = HangClock::default();
        let started = m.wall();
        m.awake(20.0);
        let training = beat(m.wall(), WorkerState::Training, 40);
        assert!(!hung(&mut c, &m, started, Some(training)).0);
        m.awake(200.0);
        assert!(!hung(&mut c, &m, started, Some(training)).0);
        // The lid closed for an hour: the wall clock says 3820 s of silence.
        m.asleep(3600.0);
        let (overdue, look) = hung(&mut c, &m, started, Some(training));
        assert!(!overdue, "a suspend read as a hang");
        assert_eq!(
            look.restart,
            Some(ClockRestart::Slept(Duration::from_secs(3600)))
        );
        assert_eq!(
            look.restart.unwrap().to_string(),
            "the machine slept 1h 0m; hang clocks restarted"
        );
        // The whole allowance again from the wake, not what was left of it.
        m.awake(299.0);
        let (overdue, look) = hung(&mut c, &m, started, Some(training));
        assert!(!overdue);
        assert_eq!(look.restart, None);
        // Still no heartbeat: a real hang, found after the wake.
        m.awake(1.0);
        let (overdue, look) = hung(&mut c, &m, started, Some(training));
        assert!(overdue);
        let w = watch(&look.said.unwrap(), &allowances()).unwrap();
        assert_eq!(w.stalled_for(m.wall()), Duration::from_secs(300));
        assert_eq!(w.step, Some(40));
    }

    #[test]
    fn a_wall_clock_jump_is_neither_a_hang_nor_hides_one() {
        let m = Machine::new();
        let mut c = HangClock::default();
        let started = m.wall();
        m.awake(10.0);
        let training = beat(m.wall(), WorkerState::Training, 7);
        assert!(!hung(&mut c, &m, started, Some(training)).0);
        m.awake(100.0);
        // Set an hour ahead (a wrong clock corrected at last): no hang.
        m.set_wall(3600.0);
        let (overdue, look) = hung(&mut c, &m, started, Some(training));
        assert!(!overdue);
        assert_eq!(
            look.restart.unwrap().to_string(),
            "the wall clock jumped 1h 0m ahead; hang clocks restarted"
        );
        m.awake(299.0);
        assert!(!hung(&mut c, &m, started, Some(training)).0);
        m.awake(1.0);
        assert!(hung(&mut c, &m, started, Some(training)).0);
        // Set back an hour: the allowance restarts, it does not stretch by an hour.
        let m = Machine::new();
        let mut c = HangClock::default();
        let started = m.wall();
        let training = beat(m.wall(), WorkerState::Training, 7);
        assert!(!hung(&mut c, &m, started, Some(training)).0);
        m.awake(2.0);
        m.set_wall(-3600.0);
        let (overdue, look) = hung(&mut c, &m, started, Some(training));
        assert!(!overdue);
        assert!(matches!(look.restart, Some(ClockRestart::WallJumped(s)) if s < -3599.0));
        m.awake(300.0);
        assert!(hung(&mut c, &m, started, Some(training)).0);
    }

    #[test]
    fn each_new_heartbeat_restarts_the_clock_and_a_daemon_restart_dates_by_the_wall() {
        let m = Machine::new();
        let mut c = HangClock::default();
        let started = m.wall();
        // A daemon that comes up to a worker whose heartbeat is 250 s old: dated by
        // the wall clock, the only witness.
        m.awake(260.0);
        let old = beat(t(10.0), WorkerState::Training, 3);
        assert!(!hung(&mut c, &m, started, Some(old)).0);
        m.awake(50.0);
        assert!(hung(&mut c, &m, started, Some(old)).0);
        // A heartbeat dated in the future (another node's clock): counts from when
        // it was first seen.
        m.awake(2.0);
        let ahead = beat(
            m.wall() + chrono::Duration::seconds(500),
            WorkerState::Training,
            4,
        );
        let (overdue, look) = hung(&mut c, &m, started, Some(ahead));
        assert!(!overdue);
        assert_eq!(look.said.unwrap().since, m.wall());
        m.awake(300.0);
        assert!(hung(&mut c, &m, started, Some(ahead)).0);
        // An ending worker is not watched.
        let done = beat(m.wall(), WorkerState::Finished, 9);
        assert_eq!(hung(&mut c, &m, started, Some(done)).1.said, None);
    }
}
