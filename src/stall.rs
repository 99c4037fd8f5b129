//! When a worker counts as hung. Each phase its heartbeat names has an allowance
//! of its own, so a long save or evaluation is not a hang: until the first
//! heartbeat after a (re)start (`startup_grace_s`, from the start), while it says
//! `starting` (`startup_grace_s` again), `loading`, `evaluating` or `saving` (each
//! its own key), and between training steps (`stale_after_s`, a number or learned
//! from the run's own heartbeats when `auto`), each counted from the last thing the
//! worker said (its start, else its latest heartbeat): a phase change restarts the
//! clock. Under the daemon that instant is measured on the monotonic clock, and a
//! suspend or a wall-clock jump grants the allowance afresh (`daemon/src/status/hang_clock.rs`).
//! Pure: the clock is passed in. The status shows the verdict as
//! `heartbeat_stale`; the watchdog hands it to the pipeline actor, which acts.

use std::time::Duration;

use crate::config::{PipelineStep, StaleAfter, SupervisorConfig};
use crate::heartbeat::{Heartbeat, WorkerState};
use crate::pipeline_step::HangWatch;
use crate::step_heartbeat::StepHeartbeat;
use chrono::{DateTime, SubsecRound, Utc};

use crate::pipeline_file::WorkerRecord;

/// The config key of the data steps' and `mine_hard`'s allowance.
pub const DATA_STEP_KEY: &str = "supervisor.data_step_stale_after_s";

/// The config key that sets the allowance of the phase a heartbeat names
/// (`starting` also covers the wait for the first heartbeat).
fn allowance_key(phase: WorkerState) -> &'static str {
    match phase {
        WorkerState::Loading => "supervisor.loading_grace_s",
        WorkerState::Evaluating => "supervisor.evaluating_grace_s",
        WorkerState::Saving => "supervisor.saving_grace_s",
        WorkerState::Training => "supervisor.stale_after_s",
        _ => "supervisor.startup_grace_s",
    }
}

/// The allowance of each phase under the `supervisor:` section `sup`, for a run
/// whose longest steady interval between two training heartbeats so far is
/// `learned_s` (`stale_after_s: auto`).
pub fn allowances(sup: &SupervisorConfig, learned_s: Option<f64>) -> Allowances {
    let training_s = match sup.stale_after_s {
        StaleAfter::Seconds(s) => s,
        StaleAfter::Auto => sup.stale_auto.allowance_s(learned_s),
    };
    Allowances {
        startup: Duration::from_secs(sup.startup_grace_s),
        loading: Duration::from_secs(sup.loading_grace_s),
        evaluating: Duration::from_secs(sup.evaluating_grace_s),
        saving: Duration::from_secs(sup.saving_grace_s),
        training: Duration::from_secs_f64(training_s.max(0.0)),
        data_step: Duration::from_secs(sup.data_step_stale_after_s),
    }
}

/// How long a worker may stay in each phase without a new heartbeat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Allowances {
    pub startup: Duration,
    pub loading: Duration,
    pub evaluating: Duration,
    pub saving: Duration,
    pub training: Duration,
    /// A data step or `mine_hard`, whatever it is doing.
    pub data_step: Duration,
}

impl Allowances {
    /// The allowance of a phase; `None` for the states a worker ends in.
    pub fn of(&self, phase: WorkerState) -> Option<Duration> {
        match phase {
            WorkerState::Starting => Some(self.startup),
            WorkerState::Loading => Some(self.loading),
            WorkerState::Training => Some(self.training),
            WorkerState::Evaluating => Some(self.evaluating),
            WorkerState::Saving => Some(self.saving),
            WorkerState::Stopping | WorkerState::Finished | WorkerState::Failed => None,
        }
    }
}

/// What the heartbeat on disk says, as far as hangs go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Beat {
    pub at: DateTime<Utc>,
    pub state: WorkerState,
    pub step: u64,
}

impl Beat {
    /// `None` when the heartbeat's timestamp does not parse.
    pub fn of(hb: &Heartbeat) -> Option<Beat> {
        Some(Beat {
            at: hb.time()?,
            state: hb.state,
            step: hb.step,
        })
    }
}

/// The last thing a worker said: the phase it is in (`starting` from its launch
/// until its first heartbeat), its training step when its heartbeat names one, and
/// when it said it. Each new heartbeat, and so each phase change, restarts the
/// phase's allowance (`loading` then `starting` gets a fresh start-up allowance).
/// `since` is dated by the wall clock here; under the daemon
/// `daemon/src/status/hang_clock.rs` dates it again on the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Said {
    /// The pipeline step the worker runs: training has phases; a data step or
    /// `mine_hard` is `starting` until its first progress beat, then `training`
    /// (working), under one allowance.
    pub work: PipelineStep,
    pub phase: WorkerState,
    pub step: Option<u64>,
    pub since: DateTime<Utc>,
}

/// What the worker (re)started at `started` last said, given the heartbeat on disk
/// (`None`: none, or unreadable). A heartbeat older than the start is the previous
/// worker's: the new one is still starting up. `None`: the heartbeat says the
/// worker is ending, nothing to watch.
pub fn said(started: DateTime<Utc>, beat: Option<&Beat>) -> Option<Said> {
    // Heartbeats carry their time in whole milliseconds: one written in the
    // millisecond the worker started is this worker's.
    let started = started.trunc_subsecs(3);
    let Some(beat) = beat.filter(|b| b.at >= started) else {
        return Some(Said {
            work: PipelineStep::Train,
            phase: WorkerState::Starting,
            step: None,
            since: started,
        });
    };
    match beat.state {
        WorkerState::Stopping | WorkerState::Finished | WorkerState::Failed => None,
        WorkerState::Starting => Some(Said {
            work: PipelineStep::Train,
            phase: WorkerState::Starting,
            step: None,
            since: beat.at,
        }),
        phase => Some(Said {
            work: PipelineStep::Train,
            phase,
            step: Some(beat.step),
            since: beat.at,
        }),
    }
}

/// What a data step or `mine_hard` (`work`), started at `started`, last said: its
/// latest step heartbeat when that is its own (written by this step since it
/// started), else its start.
pub fn said_by_step(
    work: PipelineStep,
    started: DateTime<Utc>,
    beat: Option<&StepHeartbeat>,
) -> Said {
    let started = started.trunc_subsecs(3);
    let own = beat
        .filter(|b| b.step == work.as_str())
        .and_then(StepHeartbeat::time)
        .filter(|at| *at >= started);
    Said {
        work,
        phase: if own.is_some() {
            WorkerState::Training
        } else {
            WorkerState::Starting
        },
        step: None,
        since: own.unwrap_or(started),
    }
}

/// A worker under watch: the phase it is in, since when, and for how long it may
/// stay there without a new heartbeat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Watch {
    pub phase: WorkerState,
    pub since: DateTime<Utc>,
    pub allowance: Duration,
    /// The training step of the heartbeat, when it is this worker's.
    pub step: Option<u64>,
    /// The pipeline step the worker runs.
    pub work: PipelineStep,
}

impl Watch {
    /// The config key that sets the allowance.
    pub fn allowance_key(&self) -> &'static str {
        if self.work.spec().hang == HangWatch::Heartbeat {
            allowance_key(self.phase)
        } else {
            DATA_STEP_KEY
        }
    }

    /// The instant the worker becomes hung unless a heartbeat comes first.
    pub fn deadline(&self) -> DateTime<Utc> {
        self.since + chrono::Duration::from_std(self.allowance).unwrap_or(chrono::Duration::MAX / 2)
    }

    pub fn overdue(&self, now: DateTime<Utc>) -> bool {
        now >= self.deadline()
    }

    /// How long it has been in the phase at `now`.
    pub fn stalled_for(&self, now: DateTime<Utc>) -> Duration {
        (now - self.since).to_std().unwrap_or_default()
    }
}

/// The watch on a worker that last said `said`.
pub fn watch(said: &Said, allowances: &Allowances) -> Option<Watch> {
    let allowance = if said.work.spec().hang == HangWatch::Heartbeat {
        allowances.of(said.phase)?
    } else {
        allowances.data_step
    };
    Some(Watch {
        phase: said.phase,
        since: said.since,
        allowance,
        step: said.step,
        work: said.work,
    })
}

/// What the pipeline's live worker (`worker`, as the record names it) last said,
/// given the heartbeat and the step heartbeat on disk.
pub fn said_by(
    worker: Option<&WorkerRecord>,
    heartbeat: Option<&Result<Heartbeat, String>>,
    step_heartbeat: Option<&StepHeartbeat>,
) -> Option<Said> {
    let worker = worker?;
    if worker.step.spec().hang == HangWatch::StepHeartbeat {
        return Some(said_by_step(worker.step, worker.started_at, step_heartbeat));
    }
    let beat = heartbeat.and_then(|hb| hb.as_ref().ok()).and_then(Beat::of);
    said(worker.started_at, beat.as_ref())
}

/// The watch on the pipeline's live worker, given what it last said (under the
/// daemon, dated on the monotonic clock) and the interval the run has learned.
pub fn assess(
    worker: Option<&WorkerRecord>,
    said: Option<&Said>,
    supervisor: &SupervisorConfig,
    learned_s: Option<f64>,
) -> Option<Watch> {
    let said = said.filter(|s| worker.is_some_and(|w| w.step == s.work))?;
    watch(said, &allowances(supervisor, learned_s))
}

/// Learns the longest steady interval between two training heartbeats of a run,
/// for `stale_after_s: auto`. Only two `training` heartbeats in a row of the same
/// worker count (a save, an evaluation or a load in between is another phase), and
/// not a worker's first interval (warm-up: allocation, compilation, caches).
#[derive(Debug, Clone, Default)]
pub struct IntervalLearner {
    worker: Option<DateTime<Utc>>,
    prev: Option<DateTime<Utc>>,
    training_beats: u32,
    longest: Option<f64>,
}

impl IntervalLearner {
    /// `longest_s`: what the run learned before (kept in its record).
    pub fn new(longest_s: Option<f64>) -> IntervalLearner {
        IntervalLearner {
            longest: longest_s,
            ..IntervalLearner::default()
        }
    }

    #[cfg(test)]
    fn longest_s(&self) -> Option<f64> {
        self.longest
    }

    /// Feeds the heartbeat on disk of the worker started at `started`; returns the
    /// longest interval when this one made it grow.
    pub fn observe(&mut self, started: DateTime<Utc>, beat: &Beat) -> Option<f64> {
        if self.worker != Some(started) {
            self.worker = Some(started);
            self.prev = None;
            self.training_beats = 0;
        }
        if beat.at < started || self.prev == Some(beat.at) {
            return None;
        }
        if beat.state != WorkerState::Training {
            self.prev = None;
            return None;
        }
        let interval = self.prev.map(|p| (beat.at - p).as_seconds_f64());
        self.prev = Some(beat.at);
        self.training_beats += 1;
        let interval = interval.filter(|_| self.training_beats >= 3)?;
        if self.longest.is_some_and(|l| l >= interval) {
            return None;
        }
        self.longest = Some(interval);
        self.longest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{OnStall, StaleAuto};

    fn t(s: f64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis((1_800_000_000.0 * 1000.0 + s * 1000.0) as i64).unwrap()
    }

    fn beat(at: f64, state: WorkerState, step: u64) -> Beat {
        Beat {
            at: t(at),
            state,
            step,
        }
    }

    fn watch_of(started: DateTime<Utc>, beat: Option<&Beat>, a: &Allowances) -> Option<Watch> {
        said(started, beat).and_then(|s| watch(&s, a))
    }

    fn settings(stale_after: StaleAfter) -> SupervisorConfig {
        SupervisorConfig {
            stale_after_s: stale_after,
            stale_auto: StaleAuto {
                factor: 5.0,
                floor_s: 2.0,
                ceiling_s: 100.0,
            },
            startup_grace_s: 30,
            loading_grace_s: 40,
            evaluating_grace_s: 50,
            saving_grace_s: 60,
            on_stall: OnStall::Restart,
            data_step_stale_after_s: 70,
            ..crate::config::Config::default().supervisor
        }
    }

    #[test]
    fn each_phase_has_its_own_allowance_from_its_own_start() {
        let a = allowances(&settings(StaleAfter::Seconds(10.0)), None);
        let started = t(0.0);
        // No heartbeat yet, or the previous worker's: starting up, from the start.
        for old in [None, Some(beat(-5.0, WorkerState::Training, 9))] {
            let w = watch_of(started, old.as_ref(), &a).unwrap();
            assert_eq!(
                (w.phase, w.since, w.step),
                (WorkerState::Starting, started, None)
            );
            assert!(!w.overdue(t(29.9)));
            assert!(w.overdue(t(30.0)));
        }
        // `starting` said later (after a long load) is a fresh start-up allowance,
        // counted from that heartbeat.
        let w = watch_of(started, Some(&beat(20.0, WorkerState::Starting, 0)), &a).unwrap();
        assert_eq!((w.phase, w.step), (WorkerState::Starting, None));
        assert_eq!(w.deadline(), t(50.0));
        // A heartbeat written in the start's millisecond is this worker's.
        let w = watch_of(
            t(10.0) + chrono::Duration::microseconds(700),
            Some(&beat(10.0, WorkerState::Loading, 0)),
            &a,
        )
        .unwrap();
        assert_eq!(w.phase, WorkerState::Loading);
        for (phase, allowance) in [
            (WorkerState::Loading, 40.0),
            (WorkerState::Training, 10.0),
            (WorkerState::Evaluating, 50.0),
            (WorkerState::Saving, 60.0),
        ] {
            let w = watch_of(started, Some(&beat(100.0, phase, 7)), &a).unwrap();
            assert_eq!((w.phase, w.step), (phase, Some(7)));
            assert_eq!(w.deadline(), t(100.0 + allowance), "{phase}");
            assert!(!w.overdue(t(100.0 + allowance - 0.001)), "{phase}");
            assert!(w.overdue(t(100.0 + allowance)), "{phase}");
            assert_eq!(
                w.stalled_for(t(100.0 + allowance)),
                Duration::from_secs_f64(allowance)
            );
        }
        // A worker that says it is ending is not watched.
        for state in [
            WorkerState::Stopping,
            WorkerState::Finished,
            WorkerState::Failed,
        ] {
            assert_eq!(watch_of(started, Some(&beat(1.0, state, 3)), &a), None);
        }
    }

    #[test]
    fn a_data_step_has_its_own_allowance_from_its_own_progress_beat() {
        let a = allowances(&settings(StaleAfter::Seconds(10.0)), None);
        let started = t(0.0);
        let step_beat = |at: f64, step: &str| StepHeartbeat {
            step: step.into(),
            timestamp: crate::time::rfc3339_z(t(at)),
            pid: 1,
            items: 5,
        };
        // No beat yet, or the previous step's, or one from before the start.
        for beat in [
            None,
            Some(step_beat(30.0, "downloads")),
            Some(step_beat(-1.0, "dedup")),
        ] {
            let s = said_by_step(PipelineStep::Dedup, started, beat.as_ref());
            let w = watch(&s, &a).unwrap();
            assert_eq!((w.phase, w.since), (WorkerState::Starting, started));
            assert_eq!(w.deadline(), t(70.0));
            assert_eq!(w.allowance_key(), DATA_STEP_KEY);
        }
        // Its own beat: working, the allowance counted from it.
        let own = step_beat(30.0, "mine_hard");
        let s = said_by_step(PipelineStep::MineHard, started, Some(&own));
        let w = watch(&s, &a).unwrap();
        assert_eq!(
            (w.phase, w.work),
            (WorkerState::Training, PipelineStep::MineHard)
        );
        assert_eq!(w.deadline(), t(100.0));
        assert!(!w.overdue(t(99.9)));
        assert!(w.overdue(t(100.0)));
        // The training worker's keys are the phases'.
        let train = watch_of(started, Some(&beat(1.0, WorkerState::Saving, 3)), &a).unwrap();
        assert_eq!(train.allowance_key(), "supervisor.saving_grace_s");
    }

    #[test]
    fn a_long_save_is_not_a_hang_but_the_same_silence_while_training_is() {
        let a = allowances(&settings(StaleAfter::Seconds(1.0)), None);
        let saving = watch_of(t(0.0), Some(&beat(5.0, WorkerState::Saving, 20)), &a).unwrap();
        let training = watch_of(t(0.0), Some(&beat(5.0, WorkerState::Training, 20)), &a).unwrap();
        assert!(!saving.overdue(t(8.0)));
        assert!(training.overdue(t(8.0)));
    }

    #[test]
    fn auto_learns_from_steady_training_intervals_only() {
        let s = settings(StaleAfter::Auto);
        // Nothing learned yet: the ceiling.
        assert_eq!(allowances(&s, None).training, Duration::from_secs(100));
        let mut l = IntervalLearner::new(None);
        let w = t(0.0);
        // The first interval of a worker is warm-up.
        assert_eq!(l.observe(w, &beat(1.0, WorkerState::Training, 1)), None);
        assert_eq!(l.observe(w, &beat(9.0, WorkerState::Training, 2)), None);
        assert_eq!(
            l.observe(w, &beat(10.0, WorkerState::Training, 3)),
            Some(1.0)
        );
        // The same heartbeat seen twice, a shorter interval: nothing new.
        assert_eq!(l.observe(w, &beat(10.0, WorkerState::Training, 3)), None);
        assert_eq!(l.observe(w, &beat(10.5, WorkerState::Training, 4)), None);
        // A save in between is another phase: its gap does not count.
        assert_eq!(l.observe(w, &beat(11.0, WorkerState::Saving, 4)), None);
        assert_eq!(l.observe(w, &beat(40.0, WorkerState::Training, 4)), None);
        assert_eq!(
            l.observe(w, &beat(42.0, WorkerState::Training, 5)),
            Some(2.0)
        );
        assert_eq!(
            allowances(&s, l.longest_s()).training,
            Duration::from_secs(10)
        );
        // A restarted worker warms up again; the run's longest is kept.
        let w2 = t(100.0);
        assert_eq!(l.observe(w2, &beat(99.0, WorkerState::Training, 5)), None);
        assert_eq!(l.observe(w2, &beat(101.0, WorkerState::Training, 5)), None);
        assert_eq!(l.observe(w2, &beat(111.0, WorkerState::Training, 6)), None);
        assert_eq!(l.observe(w2, &beat(112.0, WorkerState::Training, 7)), None);
        assert_eq!(l.longest_s(), Some(2.0));
        // Floor and ceiling.
        assert_eq!(allowances(&s, Some(0.01)).training, Duration::from_secs(2));
        assert_eq!(
            allowances(&s, Some(1000.0)).training,
            Duration::from_secs(100)
        );
        // A number overrides what was learned.
        let fixed = allowances(&settings(StaleAfter::Seconds(7.5)), Some(2.0));
        assert_eq!(fixed.training, Duration::from_secs_f64(7.5));
    }
}
