//! The live progress line of `start --foreground`.

use std::io::{IsTerminal, Write};

use lavender::status::Status;

/// The one-line summary (state, step, progress, loss, speed, ETA); also systemd's STATUS=.
pub fn line(s: &Status) -> String {
    let t = &s.training;
    let step = s.active_step.as_deref().unwrap_or("-");
    let mut out = format!("[{}] {}", s.pipeline.state, step);
    if let (Some(done), Some(total)) = (t.step, t.total_steps) {
        out.push_str(&format!(" {done}/{total}"));
        if let Some(pct) = t.pct {
            out.push_str(&format!(" ({pct:.1}%)"));
        }
    }
    if let Some(loss) = t.loss_smooth.or(t.loss) {
        out.push_str(&format!(" loss {loss:.3}"));
    }
    if let Some(sps) = t.steps_per_sec {
        out.push_str(&format!(" {sps:.2} it/s"));
    }
    if let Some(eta) = t.eta_seconds {
        out.push_str(&format!(" ETA {}h{:02}m", eta / 3600, (eta % 3600) / 60));
    }
    if s.pipeline.restarts > 0 {
        out.push_str(&format!(" restarts {}", s.pipeline.restarts));
    }
    out
}

pub fn print(s: &Status) {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err, "\r\x1b[2K{}", line(s));
        let _ = err.flush();
    }
}

pub fn finish(s: &Status) {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = writeln!(err, "\r\x1b[2K{}", line(s));
    } else {
        let _ = writeln!(err, "{}", line(s));
    }
}
