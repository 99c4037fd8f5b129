//! One run's ledger: every second of its wall time into one bucket
//! (`lavender::goodput::Bucket`), from what the daemon sees — its own transitions,
//! the worker's heartbeats and events. Pure: each call carries its time, so the
//! table tests replay a night in microseconds.
//!
//! Time goes to the bucket of what was last seen, until something else is seen.
//! Two things are only known later and are moved afterwards: the silence of a hung
//! worker (its last heartbeat → its kill) out of the bucket its last heartbeat
//! named into `hang_detection`, and, when a worker is relaunched from the checkpoint
//! of step K, the productive time since step K was reached into `rework`.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use lavender::config::PipelineStep;
use lavender::events::{Event, kind};
use lavender::goodput::{Bucket, Buckets};
use lavender::heartbeat::{Heartbeat, WorkerState};
use lavender::pipeline_file::PipelineRecord;
use lavender::status::{PipelineState, RecoveryReason};

/// Width of the bins the last 24 hours are counted in.
pub(crate) const BIN_S: i64 = 600;
/// Bins kept: 24 hours and the one under way.
const BINS: usize = 24 * 3600 / BIN_S as usize + 1;
/// Heartbeat samples kept per timeline; older ones are thinned (every other one
/// dropped), which keeps the interpolation close for a checkpoint far back.
const SAMPLES: usize = 512;

/// What the ledger last saw, which decides where time goes now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Seen {
    pub state: Option<PipelineState>,
    /// The active step is a data step (downloads … precompute, mine_hard).
    pub data_step: bool,
    /// The running worker (its handle, as written) and its pid.
    pub worker: Option<String>,
    pub pid: Option<u32>,
    /// When it was launched: a heartbeat from another pid (a rank the launcher
    /// started) counts when written after it.
    #[serde(default, with = "lavender::time::rfc3339_opt")]
    pub started_at: Option<DateTime<Utc>>,
    /// Its Slurm job waits for nodes.
    pub pending: bool,
    /// The phase its last heartbeat named; `None` before its first.
    pub beat: Option<WorkerState>,
    /// The last heartbeat's (step, timestamp): a new one is news.
    pub beat_key: Option<(u64, String)>,
    /// `pipeline.recovery.at` of the last relaunch counted.
    pub recovery_at: Option<String>,
}

impl Seen {
    /// Where time goes while this is what the daemon sees.
    pub(crate) fn bucket(&self) -> Bucket {
        match self.state {
            Some(PipelineState::Running) if self.pending => Bucket::Stopped,
            Some(PipelineState::Running) if self.data_step => Bucket::DataSteps,
            Some(PipelineState::Running) => match self.beat {
                None | Some(WorkerState::Starting) => Bucket::Startup,
                Some(WorkerState::Loading) => Bucket::Restore,
                Some(WorkerState::Training | WorkerState::Finished) => Bucket::Productive,
                Some(WorkerState::Evaluating) => Bucket::Eval,
                Some(WorkerState::Saving) => Bucket::SaveStall,
                Some(WorkerState::Stopping) => Bucket::Stopped,
                Some(WorkerState::Failed) => Bucket::Backoff,
            },
            // A failed worker's wait for its next launch: the backoff, or free space.
            Some(PipelineState::Crashed | PipelineState::WaitingForDisk) => Bucket::Backoff,
            _ => Bucket::Stopped,
        }
    }

    /// True while the run's clock runs: a worker is launched, stopping, or due
    /// again (after a crash, or once the disk has room), or an operator's stop holds
    /// it (counted as `stopped`).
    pub(crate) fn counts(&self) -> bool {
        matches!(
            self.state,
            Some(
                PipelineState::Running
                    | PipelineState::Stopping
                    | PipelineState::Crashed
                    | PipelineState::WaitingForDisk
                    | PipelineState::Stopped
            )
        )
    }
}

/// What a heartbeat said, and the seconds counted (into `bucket`) until the next.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Since {
    pub state: WorkerState,
    pub seconds: f64,
    pub bucket: Option<Bucket>,
}

/// Heartbeats remembered for a hang.
const BEATS: usize = 4;

/// A failure not yet recovered from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Outage {
    /// On the run's clock (its counted seconds).
    pub at_s: f64,
    /// The step the run had reached.
    pub reached: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunLedger {
    pub seconds: Buckets,
    /// The last 24 hours in bins: (bin start, unix seconds; seconds per bucket).
    pub bins: VecDeque<(i64, Buckets)>,
    pub seen: Seen,
    /// When the ledger last counted (a restarted daemon counts the time since then
    /// to the bucket it was in).
    #[serde(default, with = "lavender::time::rfc3339_opt")]
    pub last_wall: Option<DateTime<Utc>>,
    /// The end of the last second counted into the run.
    #[serde(default, with = "lavender::time::rfc3339_opt")]
    pub counted_until: Option<DateTime<Utc>>,
    /// (step, productive seconds when it was reached) of this timeline, in step order.
    pub samples: Vec<(u64, f64)>,
    /// The highest step the running worker reached.
    pub reached: u64,
    /// The running worker's last heartbeats, newest last, each with the seconds
    /// counted after it and where: a hang moves the silence to `hang_detection`.
    pub beats: Vec<Since>,
    /// Seconds in `saving` since the last save event.
    pub saving_s: f64,
    pub interruptions: BTreeMap<String, u32>,
    pub failures: u32,
    pub outage: Option<Outage>,
    /// Recoveries: their count and summed seconds (MTTR).
    pub recoveries: u32,
    pub recovery_s: f64,
    /// Saves measured: their count and summed stall (the save cost C).
    pub saves: u32,
    pub save_stall_s: f64,
}

impl RunLedger {
    /// Counts `dt` seconds, ending at `wall`, to where time goes now; `suspended`
    /// seconds (the machine slept) to `stopped`.
    pub(crate) fn advance(&mut self, wall: DateTime<Utc>, dt: f64, suspended: f64) {
        self.last_wall = Some(wall);
        if !self.seen.counts() {
            return;
        }
        self.counted_until = Some(wall);
        let bucket = self.seen.bucket();
        self.add(wall, bucket, dt.max(0.0));
        self.add(wall, Bucket::Stopped, suspended.max(0.0));
        if self.seen.beat.is_some()
            && self.seen.state == Some(PipelineState::Running)
            && let Some(last) = self.beats.last_mut()
        {
            last.seconds += dt.max(0.0);
            last.bucket = Some(bucket);
        }
        if bucket == Bucket::SaveStall {
            self.saving_s += dt.max(0.0);
        }
    }

    /// The first count of a daemon back after `alive + down` seconds away: `alive`
    /// (until the worker's last heartbeat, which said `training` when
    /// `alive_training`: the steps it made meanwhile) where the run was, or
    /// `productive`; `down` (the daemon and the worker both gone: a power cut) to
    /// `stopped`. The time down is never productive, so a relaunch never moves it
    /// to `rework`.
    pub(crate) fn back(
        &mut self,
        wall: DateTime<Utc>,
        alive: f64,
        alive_training: bool,
        down: f64,
    ) {
        let running = self.seen.state == Some(PipelineState::Running) && !self.seen.data_step;
        if alive_training && running && self.seen.counts() {
            self.seen.beat = Some(WorkerState::Training);
        }
        self.advance(wall, alive, down);
    }

    fn add(&mut self, wall: DateTime<Utc>, bucket: Bucket, seconds: f64) {
        if seconds <= 0.0 {
            return;
        }
        self.seconds.add(bucket, seconds);
        let bin = wall.timestamp().div_euclid(BIN_S) * BIN_S;
        match self.bins.back_mut() {
            Some((start, b)) if *start == bin => b.add(bucket, seconds),
            _ => {
                let mut b = Buckets::default();
                b.add(bucket, seconds);
                self.bins.push_back((bin, b));
                while self.bins.len() > BINS {
                    self.bins.pop_front();
                }
            }
        }
    }

    /// Moves seconds between buckets, in the totals and the current bin.
    fn transfer(&mut self, from: Bucket, to: Bucket, seconds: f64) -> f64 {
        let moved = self.seconds.transfer(from, to, seconds);
        let mut left = moved;
        for (_, b) in self.bins.iter_mut().rev() {
            left -= b.transfer(from, to, left);
            if left <= 0.0 {
                break;
            }
        }
        moved
    }

    /// The run's clock: its counted seconds (wall less stopped).
    pub(crate) fn clock(&self) -> f64 {
        self.seconds.wall() - self.seconds.get(Bucket::Stopped)
    }

    /// A committed pipeline record.
    pub(crate) fn on_record(&mut self, record: &PipelineRecord) {
        let worker = record.worker();
        let handle = worker.map(|w| w.handle.to_string());
        let was_running = self.seen.state == Some(PipelineState::Running);
        if was_running && record.state.kind() != PipelineState::Running && self.outage.is_none() {
            // The worker is gone: a failure starts here unless a stop or a finish follows.
            if record.state.kind() == PipelineState::Crashed {
                self.outage = Some(Outage {
                    at_s: self.clock(),
                    reached: self.reached,
                });
            }
        }
        let relaunched = record.state.kind() == PipelineState::Running
            && handle.is_some()
            && handle != self.seen.worker;
        if relaunched {
            let recovery = record
                .recovery
                .as_ref()
                .filter(|r| Some(&r.at) != self.seen.recovery_at.as_ref());
            if let Some(r) = recovery {
                self.seen.recovery_at = Some(r.at.clone());
                let resumed = worker.and_then(|w| w.resumed_from_step);
                self.interrupted(r.reason, resumed);
            }
            self.seen.beat = None;
            self.seen.beat_key = None;
            self.reached = worker.and_then(|w| w.resumed_from_step).unwrap_or(0);
            self.beats.clear();
        }
        self.seen.state = Some(record.state.kind());
        self.seen.data_step = record.active_step.is_some_and(|s| s != PipelineStep::Train);
        self.seen.worker = handle;
        self.seen.pid = worker.and_then(|w| w.handle.pid());
        self.seen.started_at = worker.map(|w| w.started_at);
        self.seen.pending = worker
            .and_then(|w| w.handle.slurm_job())
            .and_then(|j| j.state.as_deref())
            .is_some_and(|s| s.eq_ignore_ascii_case("PENDING"));
        if record.state.kind() != PipelineState::Running {
            self.seen.beat = None;
        }
    }

    /// A relaunch after an interruption of `reason`, from the checkpoint of step
    /// `resumed` (`None`: a data step, or a start without a checkpoint).
    fn interrupted(&mut self, reason: RecoveryReason, resumed: Option<u64>) {
        *self
            .interruptions
            .entry(reason.as_str().to_string())
            .or_default() += 1;
        if reason != RecoveryReason::DaemonExit {
            self.failures += 1;
            if self.outage.is_none() {
                self.outage = Some(Outage {
                    at_s: self.clock(),
                    reached: self.reached,
                });
            }
        } else {
            // A stop with a save: nothing to recover from.
            self.outage = None;
        }
        if reason == RecoveryReason::Hung {
            // The worker was silent from one heartbeat until it was killed: the last
            // training one, or a save it hung in. One that still stopped on the SIGTERM
            // wrote a save and `stopping` after, in no time next to the silence; the
            // daemon may have read them or not. The silence is the longest beat since
            // the last training one.
            let from = self
                .beats
                .iter()
                .rposition(|b| b.state == WorkerState::Training)
                .unwrap_or(0);
            let silent = (from..self.beats.len())
                .rev()
                .max_by(|&a, &b| self.beats[a].seconds.total_cmp(&self.beats[b].seconds))
                .unwrap_or(from);
            let mut moved = 0.0;
            for b in self.beats.split_off(silent) {
                let from = b.bucket.unwrap_or(Bucket::Productive);
                moved += self.transfer(from, Bucket::HangDetection, b.seconds);
            }
            if let Some(o) = self.outage.as_mut() {
                o.at_s -= moved;
            }
        }
        if matches!(reason, RecoveryReason::Failed | RecoveryReason::RolledBack) {
            self.after_the_last_beat();
        }
        if let Some(k) = resumed {
            let now = self.seconds.get(Bucket::Productive);
            let at_k = self.productive_at(k).unwrap_or(now);
            self.transfer(Bucket::Productive, Bucket::Rework, now - at_k);
            let now = self.seconds.get(Bucket::Productive);
            self.samples.retain(|(s, _)| *s < k);
            self.samples.push((k, now));
        }
        self.beats.clear();
    }

    /// A worker that exited: it was productive after its last training heartbeat for
    /// at most one heartbeat interval (the step it was cut short in); the rest, until
    /// the daemon had judged its exit, goes to `backoff`, not to the steps redone.
    fn after_the_last_beat(&mut self) {
        let n = self.samples.len();
        let Some(interval) = (n >= 2).then(|| self.samples[n - 1].1 - self.samples[n - 2].1) else {
            return;
        };
        let Some(last) = self.beats.last_mut() else {
            return;
        };
        if last.state != WorkerState::Training || last.bucket != Some(Bucket::Productive) {
            return;
        }
        let excess = last.seconds - interval.max(0.0);
        if excess > 0.0 {
            last.seconds -= excess;
            self.transfer(Bucket::Productive, Bucket::Backoff, excess);
        }
    }

    /// Productive seconds when step `k` was reached on this timeline (linear between
    /// samples); `None` when no sample is at or past it.
    pub(crate) fn productive_at(&self, k: u64) -> Option<f64> {
        if k == 0 {
            return Some(0.0);
        }
        let i = self.samples.partition_point(|(s, _)| *s < k);
        let (s1, p1) = *self.samples.get(i)?;
        if s1 == k || i == 0 {
            return Some(p1);
        }
        let (s0, p0) = self.samples[i - 1];
        Some(p0 + (p1 - p0) * (k - s0) as f64 / (s1 - s0) as f64)
    }

    /// The run's heartbeat as last read. Only the running worker's counts.
    pub(crate) fn on_heartbeat(&mut self, hb: &Heartbeat) {
        let another = self.seen.pid.is_some_and(|pid| pid != hb.pid)
            && lavender::time::parse_rfc3339(&hb.timestamp)
                .zip(self.seen.started_at)
                .is_none_or(|(written, started)| written < started);
        if self.seen.state != Some(PipelineState::Running) || self.seen.data_step || another {
            return;
        }
        let key = (hb.step, hb.timestamp.clone());
        if self.seen.beat_key.as_ref() == Some(&key) && self.seen.beat == Some(hb.state) {
            return;
        }
        self.seen.beat_key = Some(key);
        self.seen.beat = Some(hb.state);
        self.beats.push(Since {
            state: hb.state,
            seconds: 0.0,
            bucket: None,
        });
        if self.beats.len() > BEATS {
            self.beats.remove(0);
        }
        if hb.step > self.reached {
            self.reached = hb.step;
        }
        if let Some(o) = self.outage
            && hb.step > o.reached
            && hb.state == WorkerState::Training
        {
            self.recoveries += 1;
            self.recovery_s += (self.clock() - o.at_s).max(0.0);
            self.outage = None;
        }
        if hb.state == WorkerState::Training {
            self.sample(hb.step);
        }
    }

    fn sample(&mut self, step: u64) {
        let productive = self.seconds.get(Bucket::Productive);
        match self.samples.last_mut() {
            Some((s, p)) if *s == step => *p = (*p).min(productive),
            Some((s, _)) if *s > step => {
                // A step behind the timeline (a resume the ledger did not see): start it here.
                self.samples.retain(|(s, _)| *s < step);
                self.samples.push((step, productive));
            }
            _ => self.samples.push((step, productive)),
        }
        if self.samples.len() > SAMPLES {
            // Keep the newest half whole; thin the older half.
            let keep_from = self.samples.len() / 2;
            let mut i = 0;
            self.samples.retain(|_| {
                i += 1;
                i > keep_from || i % 2 == 0
            });
        }
    }

    /// An event of the run's `events.jsonl`: a save says what it cost.
    pub(crate) fn on_event(&mut self, event: &Event) {
        if event.kind != kind::CHECKPOINT_SAVED && event.kind != kind::FINAL_SAVED {
            return;
        }
        let stall = event.field("stall_s").and_then(|v| v.as_f64());
        let cost = match stall {
            Some(stall) => {
                // What of the stall the heartbeats did not show as `saving`.
                let unseen = (stall - self.saving_s).max(0.0);
                self.transfer(Bucket::Productive, Bucket::SaveStall, unseen);
                Some(stall)
            }
            None => (self.saving_s > 0.0).then_some(self.saving_s),
        };
        if let Some(c) = cost {
            self.saves += 1;
            self.save_stall_s += c;
        }
        self.saving_s = 0.0;
    }

    /// The last 24 hours before `now`, per bucket.
    pub(crate) fn last_24h(&self, now: DateTime<Utc>) -> Buckets {
        let from = now.timestamp() - 24 * 3600;
        self.bins
            .iter()
            .filter(|(start, _)| start + BIN_S > from)
            .fold(Buckets::default(), |acc, (_, b)| acc.plus(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::pipeline_file::{ProcessIdentity, RecordState, WorkerHandle, WorkerRecord};
    use lavender::status::Recovery;

    fn t0() -> DateTime<Utc> {
        lavender::time::parse_rfc3339("2026-12-01T00:00:00Z").unwrap()
    }

    /// A ledger driven through a scripted night, one second at a time.
    struct Night {
        ledger: RunLedger,
        now: f64,
        record: PipelineRecord,
        pid: u32,
        beat: u64,
    }

    impl Night {
        fn new() -> Night {
            let mut record = PipelineRecord::idle();
            record.active_step = Some(PipelineStep::Train);
            Night {
                ledger: RunLedger::default(),
                now: 0.0,
                record,
                pid: 100,
                beat: 0,
            }
        }

        fn pass(&mut self, seconds: f64) {
            let wall = t0() + chrono::Duration::milliseconds((self.now + seconds) as i64 * 1000);
            self.ledger.advance(wall, seconds, 0.0);
            self.now += seconds;
        }

        fn launch(&mut self, resumed: Option<u64>, why: Option<RecoveryReason>) {
            self.pid += 1;
            self.record.state = RecordState::Running {
                worker: Some(WorkerRecord {
                    handle: WorkerHandle::Local(ProcessIdentity {
                        pid: self.pid,
                        start_time: self.pid.to_string(),
                        generation: None,
                    }),
                    step: PipelineStep::Train,
                    started_at: t0(),
                    resumed_from_step: resumed,
                }),
            };
            self.record.recovery = why.map(|reason| Recovery {
                reason,
                message: String::new(),
                at: format!("{}", self.now),
                checkpoint: None,
            });
            self.ledger.on_record(&self.record);
        }

        fn state(&mut self, state: PipelineState) {
            self.record.state = match state {
                PipelineState::Running => RecordState::Running {
                    worker: self.record.worker().cloned(),
                },
                _ => RecordState::of_kind(state),
            };
            self.ledger.on_record(&self.record);
        }

        fn beat(&mut self, step: u64, state: WorkerState) {
            self.beat += 1;
            let hb: Heartbeat = serde_json::from_value(serde_json::json!({
                "step": step, "total_steps": 1000, "stage": "pretrain",
                "timestamp": format!("t{}", self.beat), "pid": self.pid, "state": state,
            }))
            .unwrap();
            self.ledger.on_heartbeat(&hb);
        }

        /// `n` steps of `secs` each from `from`, a heartbeat before the first and
        /// after each.
        fn train(&mut self, from: u64, n: u64, secs: f64) {
            self.beat(from, WorkerState::Training);
            for s in from + 1..=from + n {
                self.pass(secs);
                self.beat(s, WorkerState::Training);
            }
        }

        fn get(&self, b: Bucket) -> f64 {
            self.ledger.seconds.get(b)
        }
    }

    #[test]
    fn a_wait_for_disk_space_is_counted_as_backoff() {
        let mut n = Night::new();
        n.launch(None, None);
        n.beat(0, WorkerState::Starting);
        n.train(0, 10, 1.0); // a save at 10 found the disk full
        n.state(PipelineState::WaitingForDisk);
        n.pass(600.0); // until space came back
        n.launch(Some(10), Some(RecoveryReason::Failed));
        n.train(10, 5, 1.0);
        assert_eq!(n.get(Bucket::Backoff), 600.0);
        assert_eq!(n.get(Bucket::Productive), 15.0);
        assert_eq!(n.ledger.seconds.wall(), n.now);
    }

    #[test]
    fn a_crash_puts_the_steps_since_the_checkpoint_into_rework() {
        let mut n = Night::new();
        n.launch(None, None);
        n.pass(5.0); // start-up
        n.beat(0, WorkerState::Starting);
        n.pass(2.0);
        n.train(0, 17, 1.0); // checkpoint at 10 (saved in no time), then 11..17
        n.pass(0.5); // half of step 18, then SIGKILL
        n.state(PipelineState::Crashed);
        n.pass(3.0); // backoff
        n.launch(Some(10), Some(RecoveryReason::Failed));
        n.pass(4.0);
        n.train(10, 10, 1.0);
        assert_eq!(n.get(Bucket::Startup), 5.0 + 2.0 + 4.0);
        assert_eq!(n.get(Bucket::Backoff), 3.0);
        assert_eq!(n.get(Bucket::Rework), 7.5);
        assert_eq!(n.get(Bucket::Productive), 20.0);
        assert_eq!(n.ledger.seconds.wall(), n.now);
        assert_eq!(n.ledger.interruptions["failed"], 1);
        // Failed at 24.5 s of the run's clock, past step 17 at 7.5 + 3 + 4 + 8 s later.
        assert_eq!(n.ledger.recoveries, 1);
        assert_eq!(n.ledger.recovery_s, 3.0 + 4.0 + 8.0);
    }

    #[test]
    fn a_crash_judged_late_counts_the_wait_as_backoff_not_rework() {
        let mut n = Night::new();
        n.launch(None, None);
        n.beat(0, WorkerState::Starting);
        n.train(0, 17, 1.0); // checkpoint at 10, then 11..17
        n.pass(3.0); // killed half-way through step 18; its exit judged 2.5 s later
        n.state(PipelineState::Crashed);
        n.pass(1.0);
        n.launch(Some(10), Some(RecoveryReason::Failed));
        // At most one heartbeat interval after the last beat was work; the rest waited.
        assert_eq!(n.get(Bucket::Rework), 7.0 + 1.0);
        assert_eq!(n.get(Bucket::Backoff), 2.0 + 1.0);
        assert_eq!(n.ledger.seconds.wall(), n.now);
    }

    #[test]
    fn a_hang_moves_the_silence_to_hang_detection_and_the_steps_before_to_rework() {
        let mut n = Night::new();
        n.launch(None, None);
        n.beat(0, WorkerState::Starting);
        n.train(0, 14, 2.0); // checkpoint at 10; hangs after 14
        n.pass(30.0); // silent: stale, then killed
        n.state(PipelineState::Crashed);
        n.launch(Some(10), Some(RecoveryReason::Hung));
        assert_eq!(n.get(Bucket::HangDetection), 30.0);
        assert_eq!(n.get(Bucket::Rework), 8.0);
        assert_eq!(n.get(Bucket::Productive), 20.0);
        assert_eq!(n.ledger.seconds.wall(), n.now);
        // The outage began at the last heartbeat.
        assert_eq!(n.ledger.outage.unwrap().at_s, 28.0);
    }

    #[test]
    fn a_hung_worker_that_still_saves_on_the_sigterm_counts_the_save_as_the_kill() {
        let mut n = Night::new();
        n.launch(None, None);
        n.beat(0, WorkerState::Starting);
        n.train(0, 12, 1.0); // hangs after 12
        n.pass(20.0); // silent until judged
        n.beat(12, WorkerState::Saving);
        n.pass(2.0);
        n.beat(12, WorkerState::Stopping);
        n.pass(0.5);
        n.state(PipelineState::Crashed);
        n.launch(Some(12), Some(RecoveryReason::Hung));
        assert_eq!(n.get(Bucket::HangDetection), 22.5);
        assert_eq!(n.get(Bucket::SaveStall), 0.0);
        assert_eq!(n.get(Bucket::Rework), 0.0);
        assert_eq!(n.get(Bucket::Productive), 12.0);
    }

    #[test]
    fn a_hung_worker_whose_stopping_beat_went_unread_still_counts_the_silence() {
        let mut n = Night::new();
        n.launch(None, None);
        n.beat(0, WorkerState::Starting);
        n.train(0, 12, 1.0); // hangs after 12
        n.pass(2.0); // silent until judged
        n.beat(12, WorkerState::Saving); // the stop's save; its `stopping` not read
        n.pass(0.1);
        n.state(PipelineState::Crashed);
        n.launch(Some(12), Some(RecoveryReason::Hung));
        assert_eq!(n.get(Bucket::HangDetection), 2.1);
        assert_eq!(n.get(Bucket::Productive), 12.0);
    }

    #[test]
    fn a_worker_hung_in_a_save_counts_the_save_as_the_silence() {
        let mut n = Night::new();
        n.launch(None, None);
        n.beat(0, WorkerState::Starting);
        n.train(0, 10, 1.0);
        n.beat(10, WorkerState::Saving);
        n.pass(30.0); // the save never ends
        n.state(PipelineState::Crashed);
        n.launch(Some(5), Some(RecoveryReason::Hung));
        assert_eq!(n.get(Bucket::HangDetection), 30.0);
        assert_eq!(n.get(Bucket::Rework), 5.0);
        assert_eq!(n.get(Bucket::Productive), 5.0);
    }

    #[test]
    fn a_rollback_reworks_from_the_older_checkpoint_once() {
        let mut n = Night::new();
        n.launch(None, None);
        n.beat(0, WorkerState::Starting);
        n.train(0, 25, 1.0); // checkpoints at 10, 20; crash after 25
        n.state(PipelineState::Crashed);
        n.launch(Some(20), Some(RecoveryReason::Failed));
        assert_eq!(n.get(Bucket::Rework), 5.0);
        n.train(20, 8, 1.0); // to 28, diverged since 15: back to 10
        n.state(PipelineState::Crashed);
        n.launch(Some(10), Some(RecoveryReason::RolledBack));
        // 11..20 once, 21..28 of the second attempt; 21..25 of the first were counted already.
        assert_eq!(n.get(Bucket::Rework), 5.0 + 10.0 + 8.0);
        assert_eq!(n.get(Bucket::Productive), 10.0);
        assert_eq!(n.ledger.interruptions["rolled_back"], 1);
    }

    #[test]
    fn phases_go_to_their_buckets_and_a_stop_is_kept_apart() {
        let mut n = Night::new();
        n.launch(None, None);
        n.beat(0, WorkerState::Loading);
        n.pass(3.0);
        n.train(0, 2, 1.0);
        n.beat(2, WorkerState::Evaluating);
        n.pass(4.0);
        n.beat(2, WorkerState::Saving);
        n.pass(1.5);
        n.ledger
            .on_event(&Event::new(kind::CHECKPOINT_SAVED, "saved"));
        n.beat(2, WorkerState::Training);
        n.state(PipelineState::Stopped);
        n.pass(100.0);
        assert_eq!(n.get(Bucket::Restore), 3.0);
        assert_eq!(n.get(Bucket::Eval), 4.0);
        assert_eq!(n.get(Bucket::SaveStall), 1.5);
        assert_eq!(n.get(Bucket::Stopped), 100.0);
        assert_eq!(n.ledger.saves, 1);
        assert_eq!(n.ledger.seconds.goodput(), Some(2.0 / 10.5));
        // A finished run's clock stops.
        n.state(PipelineState::Finished);
        n.pass(50.0);
        assert_eq!(n.ledger.seconds.wall(), 110.5);
    }

    #[test]
    fn a_save_stall_the_heartbeats_missed_comes_from_the_event() {
        let mut n = Night::new();
        n.launch(None, None);
        n.beat(0, WorkerState::Starting);
        n.train(0, 10, 1.0);
        let saved = Event::new(kind::CHECKPOINT_SAVED, "saved").with("stall_s", 0.75);
        n.ledger.on_event(&saved);
        assert_eq!(n.get(Bucket::SaveStall), 0.75);
        assert_eq!(n.get(Bucket::Productive), 9.25);
        assert_eq!(n.ledger.save_stall_s, 0.75);
    }

    #[test]
    fn the_last_24_hours_leave_the_day_before_out() {
        let mut n = Night::new();
        n.launch(None, None);
        n.pass(3000.0); // start-up, more than a day ago
        n.beat(0, WorkerState::Starting);
        n.beat(1, WorkerState::Training);
        n.pass(25.0 * 3600.0);
        let day = n
            .ledger
            .last_24h(t0() + chrono::Duration::seconds(n.now as i64));
        assert!(day.get(Bucket::Startup) == 0.0, "{day:?}");
        assert!(day.get(Bucket::Productive) > 0.0);
    }
}
