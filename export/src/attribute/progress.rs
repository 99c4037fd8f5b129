//! SOURCE's progress as `attribute` shows it: which of bergson's data passes runs,
//! its rows done of its rows, rows per second and the time left, from the
//! helper's `progress {"pass", "done", "total"}` lines. [`Progress`] is pure (the
//! clock is passed in); [`View`] draws it: a bar on a terminal, else a line now
//! and then (JSON objects on stderr with `--json`).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lavender::time::duration;
use serde::{Deserialize, Serialize};

/// Plain and JSON lines are at most this often (and at each pass's end).
const LINE_EVERY: Duration = Duration::from_secs(10);

/// bergson's data passes, in SOURCE's order (`approx_unrolling/pipeline.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Step 1: the K-FAC factors, per checkpoint.
    Covariances,
    /// Step 3: the eigenvalue correction, per checkpoint.
    EigenvalueCorrection,
    /// Step 5: the queries' gradients at the final checkpoint.
    Query,
    /// Step 8: the training rows' gradients against the queries, per checkpoint.
    Scoring,
}

impl Stage {
    fn label(self) -> &'static str {
        match self {
            Stage::Covariances => "K-FAC covariances",
            Stage::EigenvalueCorrection => "eigenvalue correction",
            Stage::Query => "query gradients",
            Stage::Scoring => "scoring",
        }
    }

    fn per_checkpoint(self) -> bool {
        self != Stage::Query
    }
}

/// The passes a SOURCE call makes: with the Hessian passes cached, the query and
/// scoring passes only.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    passes: Vec<(Stage, usize)>,
    checkpoints: usize,
    /// What a training row is: "windows" or "documents".
    unit: &'static str,
}

impl Plan {
    pub(crate) fn new(
        checkpoints: usize,
        rows: usize,
        queries: usize,
        hessians_cached: bool,
        unit: &'static str,
    ) -> Plan {
        let mut passes = Vec::new();
        if !hessians_cached {
            passes.extend((0..checkpoints).map(|_| (Stage::Covariances, rows)));
            passes.extend((0..checkpoints).map(|_| (Stage::EigenvalueCorrection, rows)));
        }
        passes.push((Stage::Query, queries));
        passes.extend((0..checkpoints).map(|_| (Stage::Scoring, rows)));
        Plan {
            passes,
            checkpoints,
            unit,
        }
    }
}

/// One of the helper's `progress` lines.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Event {
    /// "covariances", "eigenvalue correction" or "gradients" (query or scoring).
    pub pass: String,
    pub done: usize,
    pub total: usize,
}

/// What is shown: `--json`'s progress object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Snapshot {
    pub event: &'static str,
    /// 1-based, of `passes`.
    pub pass: usize,
    pub passes: usize,
    pub stage: &'static str,
    /// 1-based, for the per-checkpoint passes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<usize>,
    pub checkpoints: usize,
    pub done: usize,
    pub total: usize,
    pub unit: &'static str,
    /// Rows (training rows and queries) per second since the first pass began.
    pub rows_per_s: Option<f64>,
    pub eta_s: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct Progress {
    plan: Plan,
    /// The passes begun, with their stages.
    begun: Vec<Stage>,
    done: usize,
    total: usize,
    /// Rows of the passes finished.
    rows_before: usize,
    first: Option<Duration>,
    last_line: Option<Duration>,
}

impl Progress {
    pub(crate) fn new(plan: Plan) -> Progress {
        Progress {
            plan,
            begun: Vec::new(),
            done: 0,
            total: 0,
            rows_before: 0,
            first: None,
            last_line: None,
        }
    }

    /// Takes one event at `now` (any clock, the same for every call).
    pub(crate) fn update(&mut self, e: &Event, now: Duration) {
        self.first.get_or_insert(now);
        if e.done == 0 || self.begun.is_empty() {
            if !self.begun.is_empty() {
                self.rows_before += self.total;
            }
            let stage = match e.pass.as_str() {
                "covariances" => Stage::Covariances,
                "eigenvalue correction" => Stage::EigenvalueCorrection,
                _ if self.begun.contains(&Stage::Query) => Stage::Scoring,
                _ => Stage::Query,
            };
            self.begun.push(stage);
        }
        self.done = e.done;
        self.total = e.total;
    }

    pub(crate) fn snapshot(&self, now: Duration) -> Option<Snapshot> {
        let &stage = self.begun.last()?;
        let pass = self.begun.len();
        let passes = self.plan.passes.len().max(pass);
        let checkpoint = stage
            .per_checkpoint()
            .then(|| self.begun.iter().filter(|&&s| s == stage).count());
        let rows_done = self.rows_before + self.done;
        let elapsed = now.saturating_sub(self.first.unwrap_or(now)).as_secs_f64();
        let rate = (elapsed > 0.0 && rows_done > 0).then(|| rows_done as f64 / elapsed);
        let left: usize = self.total.saturating_sub(self.done)
            + self
                .plan
                .passes
                .iter()
                .skip(pass)
                .map(|(_, rows)| rows)
                .sum::<usize>();
        Some(Snapshot {
            event: "progress",
            pass,
            passes,
            stage: stage.label(),
            checkpoint,
            checkpoints: self.plan.checkpoints,
            done: self.done,
            total: self.total,
            unit: if stage == Stage::Query {
                "queries"
            } else {
                self.plan.unit
            },
            rows_per_s: rate.map(|r| (r * 10.0).round() / 10.0),
            eta_s: rate.map(|r| (left as f64 / r).round() as u64),
        })
    }

    /// Whether a plain or JSON line is due at `now`: at a pass's start and end,
    /// else every [`LINE_EVERY`].
    pub(crate) fn line_due(&mut self, now: Duration) -> bool {
        let due = self.done == 0
            || self.done == self.total
            || self
                .last_line
                .is_none_or(|t| now.saturating_sub(t) >= LINE_EVERY);
        if due {
            self.last_line = Some(now);
        }
        due
    }
}

/// `pass 3/16, eigenvalue correction at checkpoint 1/5: 1200/5574 windows, 85.1
/// windows/s, ETA 4m 10s`.
pub(crate) fn text(s: &Snapshot) -> String {
    let mut out = format!("pass {}/{}, {}", s.pass, s.passes, s.stage);
    if let Some(c) = s.checkpoint {
        out.push_str(&format!(" at checkpoint {c}/{}", s.checkpoints));
    }
    out.push_str(&format!(": {}/{} {}", s.done, s.total, s.unit));
    if let Some(r) = s.rows_per_s {
        out.push_str(&format!(", {r:.1} rows/s"));
    }
    if let Some(eta) = s.eta_s {
        out.push_str(&format!(", ETA {}", duration(Duration::from_secs(eta))));
    }
    out
}

/// Where progress goes: a bar on a terminal, `attribute: …` lines off one, JSON
/// objects with `--json` (all on stderr; stdout is the report's).
pub(crate) struct View {
    progress: Progress,
    start: Instant,
    bar: Option<ProgressBar>,
    json: bool,
}

impl View {
    pub(crate) fn new(plan: Plan, json: bool) -> View {
        let bar = (!json && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
            bar.set_style(
                ProgressStyle::with_template("attribute: [{bar:24.magenta/blue}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("█▓░"),
            );
            bar
        });
        View {
            progress: Progress::new(plan),
            start: Instant::now(),
            bar,
            json,
        }
    }

    pub(crate) fn event(&mut self, e: &Event) {
        let now = self.start.elapsed();
        self.progress.update(e, now);
        let Some(s) = self.progress.snapshot(now) else {
            return;
        };
        if let Some(bar) = &self.bar {
            bar.set_length(s.total as u64);
            bar.set_position(s.done as u64);
            bar.set_message(text(&s));
        } else if self.progress.line_due(now) {
            if self.json {
                eprintln!("{}", serde_json::to_string(&s).expect("plain data"));
            } else {
                eprintln!("attribute: {}", text(&s));
            }
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pass: &str, done: usize, total: usize) -> Event {
        Event {
            pass: pass.into(),
            done,
            total,
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_cold_call_counts_every_pass_and_its_time_left() {
        // Two checkpoints, 100 windows, one query: 2 + 2 + 1 + 2 passes.
        let mut p = Progress::new(Plan::new(2, 100, 1, false, "windows"));
        assert!(p.snapshot(secs(0)).is_none());
        p.update(&ev("covariances", 0, 100), secs(0));
        p.update(&ev("covariances", 50, 100), secs(5));
        let s = p.snapshot(secs(5)).unwrap();
        assert_eq!((s.pass, s.passes, s.checkpoint), (1, 7, Some(1)));
        assert_eq!(s.stage, "K-FAC covariances");
        assert_eq!(s.rows_per_s, Some(10.0));
        // 50 of this pass, 100 × 5 rows later and the query: 551 rows at 10/s.
        assert_eq!(s.eta_s, Some(55));
        assert_eq!(
            text(&s),
            "pass 1/7, K-FAC covariances at checkpoint 1/2: 50/100 windows, 10.0 rows/s, ETA 55s"
        );
        p.update(&ev("covariances", 100, 100), secs(10));
        p.update(&ev("covariances", 0, 100), secs(10));
        let s = p.snapshot(secs(10)).unwrap();
        assert_eq!((s.pass, s.checkpoint, s.done), (2, Some(2), 0));
        for _ in 0..2 {
            p.update(&ev("eigenvalue correction", 0, 100), secs(20));
        }
        p.update(&ev("gradients", 0, 1), secs(30));
        let s = p.snapshot(secs(30)).unwrap();
        assert_eq!(
            (s.pass, s.stage, s.checkpoint, s.unit),
            (5, "query gradients", None, "queries")
        );
        p.update(&ev("gradients", 1, 1), secs(31));
        p.update(&ev("gradients", 0, 100), secs(31));
        p.update(&ev("gradients", 0, 100), secs(35));
        let s = p.snapshot(secs(35)).unwrap();
        assert_eq!(
            (s.pass, s.passes, s.stage, s.checkpoint),
            (7, 7, "scoring", Some(2))
        );
    }

    #[test]
    fn a_warm_call_plans_the_query_and_scoring_passes_only() {
        let mut p = Progress::new(Plan::new(5, 10, 2, true, "documents"));
        p.update(&ev("gradients", 0, 2), secs(1));
        let s = p.snapshot(secs(1)).unwrap();
        assert_eq!((s.pass, s.passes, s.stage), (1, 6, "query gradients"));
        assert_eq!((s.rows_per_s, s.eta_s), (None, None));
        p.update(&ev("gradients", 2, 2), secs(2));
        p.update(&ev("gradients", 0, 10), secs(2));
        p.update(&ev("gradients", 4, 10), secs(4));
        let s = p.snapshot(secs(4)).unwrap();
        assert_eq!(
            (s.pass, s.stage, s.checkpoint, s.unit),
            (2, "scoring", Some(1), "documents")
        );
        // 6 rows in 3 s; 6 + 40 left.
        assert_eq!((s.rows_per_s, s.eta_s), (Some(2.0), Some(23)));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["event"], "progress");
        assert_eq!(json["eta_s"], 23);
    }

    #[test]
    fn lines_come_at_a_passs_ends_and_every_ten_seconds_between() {
        let mut p = Progress::new(Plan::new(1, 100, 1, true, "windows"));
        p.update(&ev("gradients", 0, 1), secs(0));
        assert!(p.line_due(secs(0)));
        p.update(&ev("gradients", 0, 100), secs(1));
        assert!(p.line_due(secs(1)));
        p.update(&ev("gradients", 10, 100), secs(2));
        assert!(!p.line_due(secs(2)));
        p.update(&ev("gradients", 20, 100), secs(11));
        assert!(p.line_due(secs(11)));
        p.update(&ev("gradients", 30, 100), secs(12));
        assert!(!p.line_due(secs(12)));
        p.update(&ev("gradients", 100, 100), secs(13));
        assert!(p.line_due(secs(13)));
    }
}
