//! The one-line summary of a status: the foreground view's closing line, the stop's
//! progress and systemd's STATUS=.

use std::time::Duration;

use lavender::status::Status;

use lavender::time::duration;

/// The one-line summary: state, step, progress and [`numbers`].
pub fn line(s: &Status) -> String {
    let t = &s.training;
    let mut out = format!(
        "[{}] {}",
        s.pipeline.state,
        s.active_step.map_or("-", |s| s.as_str())
    );
    if let (Some(done), Some(total)) = (t.step, t.total_steps) {
        out.push_str(&format!(" {done}/{total}"));
    }
    let n = numbers(s);
    if !n.is_empty() {
        out.push_str("  ");
        out.push_str(&n);
    }
    out
}

/// Loss, steps/s, ETA and restarts, as far as known (the foreground bar's message).
pub fn numbers(s: &Status) -> String {
    let t = &s.training;
    let mut parts = Vec::new();
    if let Some(loss) = t.loss_smooth.or(t.loss) {
        parts.push(format!("loss {loss:.4}"));
    }
    if let Some(sps) = t.steps_per_sec {
        parts.push(format!("{sps:.2} it/s"));
    }
    if let Some(eta) = t.eta_seconds {
        parts.push(format!("ETA {}", duration(Duration::from_secs(eta))));
    }
    if s.pipeline.restarts > 0 {
        parts.push(format!("restarts {}", s.pipeline.restarts));
    }
    parts.join("  ")
}
