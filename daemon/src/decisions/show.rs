//! The decision log for a person: one block per decision, what the daemon saw, the
//! rule that fired, what it did and how that turned out.

use std::fmt::Write as _;

use super::log::Entry;
use super::record::{Evidence, Mode};

/// The blocks of `entries`, oldest first.
pub fn text(entries: &[Entry]) -> String {
    let mut out = String::new();
    for e in entries {
        let d = &e.decision;
        let would = match d.mode {
            Mode::Acted => "",
            Mode::WouldHave => " (observe mode: would have)",
        };
        let _ = writeln!(
            out,
            "{}  {}{would}  step {}  [{}]",
            d.at,
            d.kind.as_str(),
            d.step,
            d.id
        );
        let _ = writeln!(out, "  saw:     {}", evidence(&d.saw));
        let _ = writeln!(out, "  rule:    {}", d.rule);
        let _ = writeln!(out, "  did:     {}", d.did);
        if let Some(bundle) = &d.bundle {
            let _ = writeln!(out, "  bundle:  {bundle}");
        }
        let _ = match &e.outcome {
            Some(o) => writeln!(out, "  outcome: {}: {}", o.result.as_str(), o.text),
            None => writeln!(out, "  outcome: not known yet"),
        };
    }
    out
}

/// The evidence in one line.
fn evidence(saw: &Evidence) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(f) = &saw.failure {
        parts.push(format!("{}: {}", f.kind, f.message));
    }
    if let Some(exit) = &saw.exit {
        parts.push(exit.clone());
    }
    if let Some(age) = saw.heartbeat_age_s {
        parts.push(format!("last heartbeat {age:.1} s old"));
    }
    if let Some(phase) = &saw.phase {
        parts.push(format!("while {phase}"));
    }
    if let Some(step) = saw.last_step {
        parts.push(format!("at step {step}"));
    }
    if let Some(n) = saw.restarts {
        parts.push(format!("{n} restart(s) in a row so far"));
    }
    if let Some(n) = saw.no_progress_restarts.filter(|&n| n > 0) {
        parts.push(format!("{n} without progress"));
    }
    if let Some(n) = saw.same_failure.filter(|&n| n > 1) {
        parts.push(format!("the same failure {n} times in a row"));
    }
    if let Some(n) = saw.rollbacks {
        parts.push(format!("{n} rollback(s) so far"));
    }
    if let Some(w) = &saw.worker {
        parts.push(format!("worker {w}"));
    }
    if let Some(note) = &saw.note {
        parts.push(note.clone());
    }
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join("; ")
    }
}
