//! Progress of a long step: an indicatif bar on a terminal, otherwise a plain line every
//! few seconds (`dedup: 41% 1,234,567 docs, 12.3 MB/s, ETA 2m`) so the daemon's log of
//! the worker's output shows how far a step has got. Under a run (`--run-dir`), the
//! same beat rewrites `<run>/step_heartbeat.json`, from which the daemon tells a
//! working step from a hung one (`supervisor.data_step_stale_after_s`).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lavender::step_heartbeat::{self, StepHeartbeat};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often plain lines are printed; with the `test-hooks` feature,
/// `LAVENDER_PROGRESS_INTERVAL_MS` overrides it.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// The run directory step heartbeats go to (one step per process).
static BEAT_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Sends this process's step heartbeats to `run_dir`; without it none is written.
pub fn beat_into(run_dir: &Path) {
    let _ = BEAT_DIR.set(run_dir.to_path_buf());
}

/// Writes the step heartbeat now: `step` is alive and has done `items`. A failed
/// write is said and not fatal (the step's work matters more than its sign of life).
pub fn beat(step: &str, items: u64) {
    let Some(dir) = BEAT_DIR.get() else {
        return;
    };
    if let Err(e) = step_heartbeat::write(dir, &StepHeartbeat::now(step, items)) {
        eprintln!("{step}: could not write the step heartbeat: {e}");
    }
}

pub struct Progress {
    name: String,
    label: &'static str,
    total_bytes: Option<u64>,
    bytes: u64,
    items: u64,
    start: Instant,
    last_line: Instant,
    last_beat: Instant,
    interval: Duration,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// `total_bytes` is the input size when known; `label` names the items ("docs").
    pub fn new(name: &str, total_bytes: Option<u64>, label: &'static str) -> Progress {
        let interval = interval();
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar =
                ProgressBar::with_draw_target(total_bytes, ProgressDrawTarget::stderr_with_hz(4));
            let template = if total_bytes.is_some() {
                "{prefix}: {bar:30} {percent:>3}% {msg} {binary_bytes_per_sec} ETA {eta}"
            } else {
                "{prefix}: {spinner} {msg} {binary_bytes_per_sec}"
            };
            bar.set_style(ProgressStyle::with_template(template).expect("valid template"));
            bar.set_prefix(name.to_string());
            bar
        });
        let now = Instant::now();
        beat(name, 0);
        Progress {
            name: name.to_string(),
            label,
            total_bytes,
            bytes: 0,
            items: 0,
            start: now,
            last_line: now,
            last_beat: now,
            interval,
            bar,
        }
    }

    /// Record `bytes` more input read and `items` more items done.
    pub fn advance(&mut self, bytes: u64, items: u64) {
        self.bytes += bytes;
        self.items += items;
        if self.last_beat.elapsed() >= self.interval {
            self.last_beat = Instant::now();
            beat(&self.name, self.items);
        }
        if let Some(bar) = &self.bar {
            bar.set_position(self.bytes);
            // Redrawing the message is cheap but not free; every 1024 items is plenty.
            if self.items % 1024 < items.max(1) {
                bar.set_message(format!("{} {}", group(self.items), self.label));
            }
        } else if self.last_line.elapsed() >= self.interval {
            self.last_line = Instant::now();
            eprintln!("{}", self.line());
            let _ = std::io::stderr().flush();
        }
    }

    /// The plain progress line for the current position.
    pub fn line(&self) -> String {
        let secs = self.start.elapsed().as_secs_f64().max(1e-6);
        let rate = self.bytes as f64 / secs;
        let mut line = format!("{}:", self.name);
        if let Some(total) = self.total_bytes.filter(|t| *t > 0) {
            let pct = (self.bytes as f64 / total as f64 * 100.0).min(100.0);
            line.push_str(&format!(" {pct:.0}%"));
        }
        line.push_str(&format!(
            " {} {}, {:.1} MB/s",
            group(self.items),
            self.label,
            rate / 1e6
        ));
        if let Some(total) = self.total_bytes.filter(|t| rate > 0.0 && *t > self.bytes) {
            let eta = (total - self.bytes) as f64 / rate;
            // A rate next to nothing makes an ETA too long to say: none then.
            if let Ok(eta) = Duration::try_from_secs_f64(eta) {
                line.push_str(&format!(", ETA {}", lavender::time::duration(eta)));
            }
        }
        line
    }

    /// Clear the bar; the caller prints the step's summary line.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `1234567` → `1,234,567`.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// How often plain lines are printed.
#[cfg(not(feature = "test-hooks"))]
fn interval() -> Duration {
    DEFAULT_INTERVAL
}

/// Test hook: `LAVENDER_PROGRESS_INTERVAL_MS` shortens the interval.
#[cfg(feature = "test-hooks")]
fn interval() -> Duration {
    std::env::var("LAVENDER_PROGRESS_INTERVAL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_INTERVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1_234_567), "1,234,567");
    }

    #[test]
    fn plain_line_has_percent_count_rate_and_eta() {
        let mut p = Progress::new("dedup", Some(1000), "docs");
        p.bar = None;
        p.interval = Duration::from_secs(3600);
        p.start = Instant::now() - Duration::from_secs(1);
        p.advance(410, 1_234_567);
        let line = p.line();
        assert!(line.starts_with("dedup: 41% 1,234,567 docs, "), "{line}");
        assert!(line.contains(" MB/s, ETA "), "{line}");
    }
}
