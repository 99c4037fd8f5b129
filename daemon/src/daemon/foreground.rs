//! What `lavenderd start --foreground` shows: an indicatif progress bar (step/total,
//! loss, steps/s, ETA) on a terminal, and one line per milestone, alert and state
//! change above it, read from the live feed. Off a terminal the bar is hidden and
//! the lines (and a final summary) are plain, for logs.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lavender::status::Status;
use serde_json::Value;
use tokio::sync::watch;

use super::progress;
use crate::feed::{Feed, Kind};

/// How long the end waits for the feed to print the last lines.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

pub struct ForegroundView {
    bar: ProgressBar,
    feed: Feed,
    /// The last feed item the printer has handled.
    printed: watch::Receiver<u64>,
    /// The last feed item before the view started.
    started_after: u64,
    printer: tokio::task::JoinHandle<()>,
}

impl ForegroundView {
    /// Starts printing the feed's milestones, alerts and state changes from now on.
    pub fn start(feed: Feed) -> ForegroundView {
        let tty = std::io::stderr().is_terminal();
        let bar = if tty {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4))
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:.bold} [{bar:32.magenta/blue}] {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("█▓░"),
        );
        bar.enable_steady_tick(Duration::from_millis(250));
        let warnings = bar.clone();
        crate::logging::show_in_view(Box::new(move |line| {
            if tty {
                warnings.println(line);
            } else {
                eprintln!("{line}");
            }
        }));
        let printer = bar.clone();
        let source = feed.clone();
        let mut cursor = feed.last_seq();
        let started_after = cursor;
        let (printed_tx, printed) = watch::channel(cursor);
        let printer = tokio::spawn(async move {
            let feed = source;
            let mut watch = feed.watch();
            while watch.wait_past(cursor).await {
                for item in feed.after(cursor).unwrap_or_default() {
                    cursor = item.seq;
                    let data: Value = serde_json::from_str(&item.data).unwrap_or(Value::Null);
                    if let Some(line) = feed_line(item.kind, &data) {
                        if tty {
                            printer.println(line);
                        } else {
                            eprintln!("{line}");
                        }
                    }
                }
                printed_tx.send_replace(cursor);
            }
        });
        ForegroundView {
            bar,
            feed,
            printed,
            started_after,
            printer,
        }
    }

    pub fn update(&self, s: &Status) {
        let t = &s.training;
        self.bar.set_prefix(format!(
            "{} {}",
            s.pipeline.state,
            s.active_step.map_or("-", |s| s.as_str())
        ));
        if let Some(total) = t.total_steps {
            self.bar.set_length(total);
        }
        if let Some(step) = t.step {
            self.bar.set_position(step);
        }
        self.bar.set_message(progress::numbers(s));
    }

    /// Lets the feed print up to the pipeline's final state (the worker's last
    /// milestones come before it) and the alert that state raises (finished, failed:
    /// it carries the reason, and the two come from different tasks in either order),
    /// then stops printing, clears the bar and prints a summary: the summary is last.
    pub async fn finish(&self, s: &Status) {
        let state = s.pipeline.state.as_str();
        let deadline = Instant::now() + FLUSH_WAIT;
        while Instant::now() < deadline {
            let items = (self.feed.after(self.started_after)).unwrap_or_else(|| self.feed.items());
            let last_of = |kind: Kind, key: &str| {
                items.iter().rev().find(|i| {
                    i.kind == kind
                        && serde_json::from_str::<Value>(&i.data).is_ok_and(|d| d[key] == state)
                })
            };
            let state_item = last_of(Kind::State, "state");
            let alert = match state {
                "finished" | "failed" => last_of(Kind::Alert, "kind").map(Some),
                _ => Some(None),
            };
            let printed = *self.printed.borrow();
            if let (Some(t), Some(a)) = (state_item, alert)
                && printed >= t.seq.max(a.map_or(0, |a| a.seq))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.printer.abort();
        self.bar.finish_and_clear();
        eprintln!("{}", progress::line(s));
    }
}

pub fn feed_line(kind: Kind, data: &Value) -> Option<String> {
    let time = |d: &Value| {
        d["ts"]
            .as_str()
            .and_then(|ts| chrono::DateTime::parse_from_rfc3339(ts).ok())
            .map(|t| {
                t.with_timezone(&chrono::Local)
                    .format("%H:%M:%S")
                    .to_string()
            })
            .unwrap_or_else(|| chrono::Local::now().format("%H:%M:%S").to_string())
    };
    let s = |v: &Value| v.as_str().unwrap_or("-").to_string();
    match kind {
        Kind::Heartbeat => None,
        Kind::Milestone => Some(format!(
            "{}  {:<18} {}",
            time(data),
            s(&data["kind"]),
            s(&data["message"])
        )),
        // Good news (finished, recovered, re-adopted) is not dressed as an alert.
        Kind::Alert
            if matches!(
                data["kind"].as_str(),
                Some("finished" | "recovered" | "adopted")
            ) =>
        {
            Some(format!(
                "{}  {:<18} {}",
                time(data),
                s(&data["kind"]),
                s(&data["message"])
            ))
        }
        Kind::Alert => Some(format!(
            "{}  ALERT              {}",
            time(data),
            s(&data["message"])
        )),
        Kind::State => Some(format!(
            "{}  {:<18} {}{}{}",
            time(&Value::Null),
            "pipeline",
            // The same state with another active step: the next step started.
            data["previous"]
                .as_str()
                .filter(|p| Some(*p) != data["state"].as_str())
                .map(|p| format!("{p} → "))
                .unwrap_or_default(),
            s(&data["state"]),
            data["active_step"]
                .as_str()
                .map(|a| format!(" ({a})"))
                .unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn feed_items_become_lines_and_heartbeats_do_not() {
        let m = feed_line(
            Kind::Milestone,
            &json!({"ts": "2026-04-24T16:08:45Z", "kind": "checkpoint_saved", "message": "saved x at step 10"}),
        )
        .unwrap();
        assert!(m.ends_with("checkpoint_saved   saved x at step 10"), "{m}");
        let a = feed_line(Kind::Alert, &json!({"message": "step train crashed"})).unwrap();
        assert!(
            a.contains("ALERT") && a.ends_with("step train crashed"),
            "{a}"
        );
        let s = feed_line(
            Kind::State,
            &json!({"state": "stopping", "previous": "running", "active_step": "train"}),
        )
        .unwrap();
        assert!(
            s.ends_with("pipeline           running → stopping (train)"),
            "{s}"
        );
        let next = feed_line(
            Kind::State,
            &json!({"state": "running", "previous": "running", "active_step": "train"}),
        )
        .unwrap();
        assert!(
            next.ends_with("pipeline           running (train)"),
            "{next}"
        );
        assert_eq!(feed_line(Kind::Heartbeat, &json!({})), None);
        let done = feed_line(
            Kind::Alert,
            &json!({"kind": "finished", "message": "pipeline finished after 39s"}),
        )
        .unwrap();
        assert!(!done.contains("ALERT"), "{done}");
        assert!(
            done.ends_with("finished           pipeline finished after 39s"),
            "{done}"
        );
    }
}
