//! The goodput ledger: where each run's wall time went (productive or lost, and to
//! what), persisted at `state/goodput.json` so a daemon restart keeps it. Fed by
//! the feed's publisher with what it already follows — every committed pipeline
//! record in order, the heartbeat of each status snapshot, each new event of the
//! run — so the pipeline actor does not change. Pure accounting in `ledger.rs`
//! (the buckets), `figures.rs` (goodput, MTBF, MTTR, Young–Daly) and
//! `slowdown.rs` (the step-time detector); this file keeps the clock, the runs and
//! the file.

mod cause;
mod figures;
mod ledger;
mod slowdown;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use lavender::config::Config;
use lavender::events::Event;
use lavender::goodput::{Buckets, GoodputStatus};
use lavender::heartbeat::Heartbeat;
use lavender::layout::Layout;
use lavender::pipeline_file::PipelineRecord;

use crate::alert::{Alert, AlertSender};
use ledger::RunLedger;
use slowdown::{Detector, Verdict};

/// The ledger is written at most this often while nothing but time changes; a
/// pipeline transition writes it at once.
const SAVE_EVERY: Duration = Duration::from_secs(5);
/// Runs kept in the file (the newest).
const KEEP_RUNS: usize = 32;
/// Wall time beyond the monotonic clock's by more than this between two counts:
/// the machine slept.
const SUSPEND_SLACK_S: f64 = 1.0;
/// A record committed longer ago than this when a run is first seen (a daemon that
/// finds an old record) does not date the run's start.
const MAX_LAG_S: f64 = 10.0;

/// `state/goodput.json`. `lavender::goodput::read_status` reads the figures of a
/// run through a view of its own.
#[derive(Debug, Default, Serialize, Deserialize)]
struct GoodputFile {
    version: u32,
    pipeline: PipelineSection,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct PipelineSection {
    /// Every run's buckets summed, and goodput over them.
    seconds: Buckets,
    goodput: Option<f64>,
    /// The run counted last.
    current: Option<String>,
    runs: BTreeMap<String, RunSection>,
}

#[derive(Debug, Serialize, Deserialize)]
struct RunSection {
    figures: GoodputStatus,
    ledger: RunLedger,
}

/// The ledger as the publisher holds it.
pub struct Goodput {
    path: PathBuf,
    file: GoodputFile,
    /// `training.stages[].checkpoint_every` (the largest).
    checkpoint_every: u64,
    /// When the ledger last counted, on both clocks; `None` right after loading.
    counted: Option<(Instant, DateTime<Utc>)>,
    /// When the run's heartbeat was last written, as last read: the worker's last
    /// sign of life, which tells a daemon restart alone from a power cut.
    beat_at: Option<DateTime<Utc>>,
    /// That heartbeat said `training`.
    beat_training: bool,
    saved: Option<Instant>,
    last_record: Option<PipelineRecord>,
    /// The step-time detector of the running worker's stage, and where its alerts go.
    slowdown: Detector,
    alerts: AlertSender,
    /// What the machine looked like when the step time went above the limit.
    suspect: std::sync::Arc<std::sync::Mutex<Option<cause::Reading>>>,
}

impl Goodput {
    /// The ledger as saved under `layout`'s state directory (empty when there is
    /// none, or it does not parse: it is an account, and starts over with a warning).
    pub fn load(layout: &Layout, config: &Config, alerts: AlertSender) -> Goodput {
        let path = lavender::goodput::path(&layout.state_dir);
        let file = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(
                    "{} does not parse ({e}); the goodput ledger starts over",
                    path.display()
                );
                GoodputFile::default()
            }),
            Err(_) => GoodputFile::default(),
        };
        let checkpoint_every = config
            .training
            .stages
            .iter()
            .map(|s| s.checkpoint_every)
            .max()
            .unwrap_or(0);
        Goodput {
            path,
            file,
            checkpoint_every,
            counted: None,
            beat_at: None,
            beat_training: false,
            saved: None,
            last_record: None,
            slowdown: Detector::new(config.supervisor.slowdown),
            alerts,
            suspect: Default::default(),
        }
    }

    /// Counts the time since the last call, then takes in what the daemon sees now:
    /// a committed record (each in order), the run's heartbeat as last read, the
    /// run's new events.
    pub fn observe(
        &mut self,
        record: &PipelineRecord,
        heartbeat: Option<&Heartbeat>,
        events: &[Event],
    ) {
        let now = (Instant::now(), lavender::time::now_utc());
        let run = record
            .run_dir
            .as_deref()
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        let moved = self.last_record.as_ref().is_none_or(|r| {
            r.state.kind() != record.state.kind()
                || r.worker() != record.worker()
                || r.run_dir != record.run_dir
        });
        // What changed is dated when it happened, not when the publisher got to it:
        // a transition at its commit, a heartbeat when written (the time before goes
        // to where the run was).
        let record_at = moved
            .then(|| lavender::time::parse_rfc3339(&record.updated_at))
            .flatten();
        let beat_at = heartbeat.and_then(|hb| lavender::time::parse_rfc3339(&hb.timestamp));
        self.beat_at = beat_at;
        self.beat_training =
            heartbeat.is_some_and(|hb| hb.state == lavender::heartbeat::WorkerState::Training);
        let beat_first = match (beat_at, record_at) {
            (Some(b), Some(r)) => b < r,
            _ => false,
        };
        if beat_first {
            self.count(self.dated(now, beat_at));
            self.beat(run.as_deref(), heartbeat);
        }
        self.count(self.dated(now, record_at));
        if let Some(run) = &run {
            self.file.pipeline.current = Some(run.clone());
            let ledger = &mut self.section(run, now.1).ledger;
            let new = ledger.last_wall.is_none();
            ledger.on_record(record);
            if new {
                // The run's clock starts at its worker's launch (or the commit of the
                // record naming it).
                let counted = self.counted.map_or(now.1, |c| c.1);
                let launched = record.worker().map(|w| w.started_at).or(record_at);
                let lag = launched
                    .map(|t| seconds(counted - t))
                    .filter(|lag| *lag < MAX_LAG_S)
                    .unwrap_or(0.0);
                let ledger = &mut self.section(run, now.1).ledger;
                ledger.advance(counted, lag, 0.0);
            }
        }
        if !beat_first {
            self.count(self.dated(now, beat_at));
            self.beat(run.as_deref(), heartbeat);
        }
        self.count(now);
        if let Some(run) = &run {
            let ledger = &mut self.section(run, now.1).ledger;
            for event in events {
                ledger.on_event(event);
            }
            // The running worker's own heartbeats (the ledger's `beat` is its).
            let training = ledger.seen.beat.is_some() && !ledger.seen.data_step;
            if let Some(hb) = heartbeat.filter(|_| training) {
                self.step_time(hb, record);
            }
        }
        self.last_record = Some(record.clone());
        if moved || self.saved.is_none_or(|t| t.elapsed() >= SAVE_EVERY) {
            self.save(now.1);
            self.saved = Some(now.0);
        }
    }

    /// The run's heartbeat to its ledger.
    fn beat(&mut self, run: Option<&str>, heartbeat: Option<&Heartbeat>) {
        let (Some(run), Some(hb)) = (run, heartbeat) else {
            return;
        };
        if let Some(section) = self.file.pipeline.runs.get_mut(run) {
            section.ledger.on_heartbeat(hb);
        }
    }

    /// `at` on both clocks, as far back from `now` as it was (never before the last
    /// count, nor in the future); `now` for `None`.
    fn dated(
        &self,
        now: (Instant, DateTime<Utc>),
        at: Option<DateTime<Utc>>,
    ) -> (Instant, DateTime<Utc>) {
        let Some(at) = at else { return now };
        let since_count = self
            .counted
            .map_or(0.0, |(m, _)| now.0.duration_since(m).as_secs_f64());
        let back = seconds(now.1 - at).min(since_count);
        (
            now.0 - Duration::from_secs_f64(back),
            now.1 - chrono::Duration::milliseconds((back * 1000.0) as i64),
        )
    }

    /// A heartbeat to the slowdown detector (each one once: a snapshot may show the
    /// same again); an alert with what the machine shows when the detector says so.
    fn step_time(&mut self, hb: &Heartbeat, record: &PipelineRecord) {
        let Some(at) = lavender::time::parse_rfc3339(&hb.timestamp) else {
            return;
        };
        let at = at.timestamp_millis() as f64 / 1000.0;
        let training = hb.state == lavender::heartbeat::WorkerState::Training;
        let verdict = self.slowdown.beat(hb.pid, training, &hb.stage, hb.step, at);
        let group = record
            .worker()
            .and_then(|w| w.handle.pid())
            .map(|p| p as i32);
        match verdict {
            None => {}
            Some(Verdict::Suspect) => {
                let suspect = self.suspect.clone();
                tokio::task::spawn_blocking(move || {
                    let reading = cause::Reading::take();
                    *suspect.lock().unwrap_or_else(|e| e.into_inner()) = Some(reading);
                });
            }
            Some(Verdict::Slow {
                stage,
                baseline_s,
                current_s,
                for_s,
            }) => {
                let (suspect, alerts) = (self.suspect.clone(), self.alerts.clone());
                tokio::task::spawn_blocking(move || {
                    let after = cause::Reading::take();
                    let before = suspect.lock().unwrap_or_else(|e| e.into_inner()).take();
                    let seen = before.map_or_else(
                        || "nothing seen of the cause yet".to_string(),
                        |b| cause::compare(&b, &after, group).to_string(),
                    );
                    let _ = alerts.send(Alert::Slowdown {
                        stage,
                        baseline_s,
                        current_s,
                        for_s,
                        seen,
                    });
                });
            }
            Some(Verdict::Recovered {
                stage,
                baseline_s,
                current_s,
            }) => {
                let _ = self.alerts.send(Alert::SlowdownRecovered {
                    stage,
                    baseline_s,
                    current_s,
                });
            }
        }
    }

    /// Counts the time since the last count to the current run. Right after a
    /// daemon (re)start that is the time since the file's last count: up to the
    /// worker's last heartbeat the run was where the ledger last saw it (a worker
    /// that outlived the daemon trained on); after it, the daemon and the worker were
    /// both down (a power cut, a crash of the machine), which is `stopped`, never the
    /// last bucket and so never `rework` once the relaunch moves the steps since its
    /// checkpoint there.
    fn count(&mut self, (mono, wall): (Instant, DateTime<Utc>)) {
        let before = self.counted.replace((mono, wall));
        let Some(run) = self.file.pipeline.current.clone() else {
            return;
        };
        let Some(section) = self.file.pipeline.runs.get_mut(&run) else {
            return;
        };
        let ledger = &mut section.ledger;
        match before {
            Some((m, w)) => {
                let dt = mono.duration_since(m).as_secs_f64();
                let wall_dt = seconds(wall - w);
                let slept = wall_dt - dt;
                ledger.advance(wall, dt, if slept > SUSPEND_SLACK_S { slept } else { 0.0 });
            }
            None => {
                let gap = ledger.last_wall.map_or(0.0, |w| seconds(wall - w));
                let alive = ledger
                    .last_wall
                    .zip(self.beat_at)
                    .map_or(0.0, |(w, beat)| seconds(beat - w))
                    .min(gap);
                let down = gap - alive;
                let (alive, down) = if down > SUSPEND_SLACK_S {
                    (alive, down)
                } else {
                    (gap, 0.0)
                };
                ledger.back(wall, alive, self.beat_training, down);
            }
        }
    }

    fn section(&mut self, run: &str, now: DateTime<Utc>) -> &mut RunSection {
        let runs = &mut self.file.pipeline.runs;
        if !runs.contains_key(run) {
            runs.insert(
                run.to_string(),
                RunSection {
                    figures: figures::figures(run, &RunLedger::default(), 0, None, now),
                    ledger: RunLedger::default(),
                },
            );
            // Run names sort by their start time.
            while runs.len() > KEEP_RUNS {
                runs.pop_first();
            }
        }
        runs.get_mut(run).expect("inserted above")
    }

    /// Computes the figures and writes the file.
    fn save(&mut self, now: DateTime<Utc>) {
        let every = self.checkpoint_every;
        let current = self.file.pipeline.current.clone();
        let step_time = self.slowdown.now();
        let mut total = Buckets::default();
        for (run, section) in self.file.pipeline.runs.iter_mut() {
            let step_time = step_time.clone().filter(|_| Some(run) == current.as_ref());
            section.figures = figures::figures(run, &section.ledger, every, step_time, now);
            total = total.plus(&section.ledger.seconds);
        }
        self.file.version = 1;
        self.file.pipeline.seconds = total;
        self.file.pipeline.goodput = total.goodput();
        if let Err(e) = lavender::atomic::write_json(&self.path, &self.file) {
            tracing::warn!("cannot save the goodput ledger: {e}");
        }
    }
}

fn seconds(d: chrono::TimeDelta) -> f64 {
    (d.num_milliseconds() as f64 / 1000.0).max(0.0)
}
