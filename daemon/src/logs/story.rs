//! The pipeline log tells the story: besides the worker's own output, a line per
//! `training.log_every` steps (at most one every [`MIN_GAP`]): step/total, stage,
//! loss, lr, steps/s, ETA; and every milestone (a save, a retention pass, an
//! evaluation) and alert (a crash and its restart, a rollback, a hang), in the words
//! the status and the pushes use. `tail -20 logs/pipeline_chunk1_*.log` and
//! `lavenderd logs -f` then show where a 20-hour run stands.
//!
//! The relay is the one writer of a pipeline log (`relay.rs`): while a worker runs,
//! the daemon writes its lines into the same pipe as the worker (one `write` per
//! line, below `PIPE_BUF`, so no line is torn), through the write end it keeps
//! ([`attach`]); it lets go of it when the worker's generation ended ([`detach`]), so
//! the relay ends with its input. Between two workers (the restart a crash alert
//! announces, the failure that ends the pipeline) the line is appended to that log.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lavender::config::LoggingConfig;
use lavender::status::TrainingStatus;

use super::rotating::RotatingFile;

/// The least time between two progress lines, however fast the steps go.
pub const MIN_GAP: Duration = Duration::from_secs(5);

struct Attached {
    token: u64,
    pipe: std::io::PipeWriter,
}

#[derive(Default)]
struct Story {
    attached: Option<Attached>,
    /// The log of the last worker, and how it rotates.
    log_file: Option<(PathBuf, LoggingConfig)>,
    cadence: Cadence,
    tokens: u64,
}

/// When the next progress line is due.
#[derive(Debug, Clone, Default)]
pub struct Cadence {
    /// `training.log_every` (0: every step).
    pub every: u64,
    /// The last line's step, time, and whether it had a loss to say.
    last: Option<(u64, Instant, bool)>,
}

impl Cadence {
    pub fn new(every: u64) -> Cadence {
        Cadence { every, last: None }
    }

    /// Whether step `step`, seen at `now` (`with_loss`: its heartbeat has a loss),
    /// gets a line: the first step seen does, and the first with a loss after lines
    /// without one (a run's step 0 has none yet, and a short stage may end before the
    /// gap); then one `every` steps past the last line's, once [`MIN_GAP`] has passed.
    pub fn due(&mut self, step: u64, with_loss: bool, now: Instant) -> bool {
        let due = match self.last {
            None => true,
            Some((_, _, false)) if with_loss => true,
            Some((last, at, _)) => {
                step >= last.saturating_add(self.every.max(1)) && now.duration_since(at) >= MIN_GAP
                    || step < last
            }
        };
        if due {
            self.last = Some((step, now, with_loss));
        }
        due
    }
}

static STORY: Mutex<Option<Story>> = Mutex::new(None);

fn story() -> MutexGuard<'static, Option<Story>> {
    STORY.lock().unwrap_or_else(|p| p.into_inner())
}

/// A worker writing into `log_file` through a pipe; `pipe` is the daemon's own write
/// end of it. `every`: `training.log_every`. Returns the token to [`detach`] with.
pub fn attach(
    log_file: PathBuf,
    limits: LoggingConfig,
    pipe: std::io::PipeWriter,
    every: u64,
) -> u64 {
    let mut guard = story();
    let s = guard.get_or_insert_with(Story::default);
    s.tokens += 1;
    s.attached = Some(Attached {
        token: s.tokens,
        pipe,
    });
    s.log_file = Some((log_file, limits));
    s.cadence = Cadence::new(every);
    s.tokens
}

/// The worker of `token` and everything it started are gone: the relay may end.
pub fn detach(token: u64) {
    if let Some(s) = story().as_mut()
        && s.attached.as_ref().is_some_and(|a| a.token == token)
    {
        s.attached = None;
    }
}

/// One line, stamped as the daemon's other lines in the log are.
pub fn say(text: &str) {
    let line = format!(
        "=== {} lavenderd: {}\n",
        lavender::time::rfc3339_z(lavender::time::now_utc()),
        text.replace('\n', " ")
    );
    let mut guard = story();
    let Some(s) = guard.as_mut() else { return };
    if let Some(a) = s.attached.as_mut() {
        // The relay gone: a line lost. (The relay drains the pipe as it comes, so a
        // line waits only as long as a worker's own write would.)
        let _ = a.pipe.write_all(line.as_bytes());
        return;
    }
    // Only into a log folder that is there: a data root that is gone (a disk
    // unplugged) is not made again beneath its mount point.
    if let Some((path, limits)) = &s.log_file
        && path.parent().is_some_and(|d| d.is_dir())
        && let Ok(mut log) = RotatingFile::open(path, *limits)
    {
        let _ = log.append(line.as_bytes());
    }
}

/// The training figures of a status snapshot: a line when one is due.
pub fn progress(t: &TrainingStatus) {
    let Some(step) = t.step else { return };
    let due = story().as_mut().is_some_and(|s| {
        s.attached.is_some() && s.cadence.due(step, t.loss.is_some(), Instant::now())
    });
    if due {
        say(&progress_text(t));
    }
}

/// `step 120/400 (pretrain): loss 2.3456, lr 3.00e-4, 4.12 steps/s, ETA 1m 5s`.
pub fn progress_text(t: &TrainingStatus) -> String {
    let mut text = format!("step {}", t.step.unwrap_or(0));
    if let Some(total) = t.total_steps {
        text.push_str(&format!("/{total}"));
    }
    if let Some(stage) = &t.stage {
        text.push_str(&format!(" ({stage})"));
    }
    let mut figures = Vec::new();
    if let Some(loss) = t.loss {
        figures.push(format!("loss {loss:.4}"));
    }
    if let Some(lr) = t.lr {
        figures.push(format!("lr {lr:.2e}"));
    }
    if let Some(rate) = t.steps_per_sec {
        figures.push(format!("{rate:.2} steps/s"));
    }
    match t.eta_seconds {
        Some(eta) => figures.push(format!(
            "ETA {}",
            lavender::time::duration(Duration::from_secs(eta))
        )),
        None => figures.push("ETA unknown".to_string()),
    }
    format!("{text}: {}", figures.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_every_log_every_steps_and_never_two_within_the_gap() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut c = Cadence::new(10);
        assert!(c.due(3, true, at(0)), "the first step seen");
        assert!(!c.due(12, true, at(1)), "not yet 10 steps on");
        assert!(!c.due(13, true, at(2)), "10 steps on, but within the gap");
        assert!(c.due(14, true, at(6)));
        assert!(!c.due(30, true, at(7)));
        assert!(c.due(31, true, at(12)));
        // Back to an earlier step (a restart from a checkpoint): said at once.
        assert!(c.due(20, true, at(13)));
    }

    #[test]
    fn the_first_loss_is_said_at_once_after_a_line_without_one() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut c = Cadence::new(10);
        assert!(c.due(0, false, at(0)), "step 0: no loss yet");
        assert!(!c.due(0, false, at(100)), "still none");
        assert!(c.due(1, true, at(200)), "the first loss, within the gap");
        assert!(!c.due(2, true, at(300)), "then the cadence again");
        assert!(!c.due(11, true, at(400)), "10 steps on, but within the gap");
        assert!(c.due(11, true, at(5_300)));
        // A worker that never reports a loss still gets its lines at the cadence.
        let mut c = Cadence::new(10);
        assert!(c.due(0, false, at(0)));
        assert!(!c.due(10, false, at(1_000)));
        assert!(c.due(10, false, at(5_000)));
    }

    #[test]
    fn the_progress_line_names_step_stage_loss_lr_rate_and_eta() {
        let mut t = TrainingStatus::unknown();
        t.step = Some(120);
        t.total_steps = Some(400);
        t.stage = Some("pretrain".into());
        t.loss = Some(2.34567);
        t.lr = Some(3e-4);
        t.steps_per_sec = Some(4.123);
        t.eta_seconds = Some(65);
        assert_eq!(
            progress_text(&t),
            "step 120/400 (pretrain): loss 2.3457, lr 3.00e-4, 4.12 steps/s, ETA 1m 5s"
        );
    }
}
