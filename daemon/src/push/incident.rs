//! Alerts that don't cry wolf: a failure the daemon retries by itself (a crash
//! restart, a hang killed and restarted, a rollback) is pushed once per incident,
//! not once per attempt; the incident's end is pushed once: recovered (the worker
//! brought back trained past where it resumed: [`Alert::IncidentOver`]), given up
//! (`failed`), finished or stopped; an incident the decision log settles without
//! a push (an operator's stop, a data step finishing) closes it with
//! [`Alert::IncidentClosed`]. Every alert is still logged; only pushes are
//! held back. Pure: the sink asks [`Incident::admit`] before it pushes.

use crate::alert::Alert;

/// Whether an incident is open (its first push went out).
#[derive(Debug, Default)]
pub(crate) struct Incident {
    open: bool,
}

impl Incident {
    /// Whether `alert`'s pushes go out.
    pub(crate) fn admit(&mut self, alert: &Alert) -> bool {
        match alert {
            // A retry: the first of the incident is pushed, later attempts are not.
            Alert::Crashed { .. } | Alert::HungRestarted { .. } | Alert::RolledBack { .. } => {
                !std::mem::replace(&mut self.open, true)
            }
            // A fresh heartbeat of a worker brought back is no end yet: it may fail
            // again; its end is `IncidentOver`, whichever of the two comes first. A
            // stall's end outside an incident is pushed.
            Alert::Recovered { stalled_for, .. } => stalled_for.is_some() && !self.open,
            // The end of the incident, whatever it was.
            Alert::IncidentOver { .. }
            | Alert::IncidentClosed { .. }
            | Alert::Failed { .. }
            | Alert::Finished { .. }
            | Alert::StoppedExternally { .. } => {
                self.open = false;
                true
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lavender::config::PipelineStep;
    use lavender::failure::{Failure, FailureKind};

    use super::*;
    use crate::alert::Repeats;
    use crate::exit::ExitOutcome;

    fn crashed(restart: u32) -> Alert {
        Alert::Crashed {
            step: PipelineStep::Train,
            outcome: ExitOutcome::Code(1),
            failure: Failure::new(FailureKind::Crash, "boom"),
            restart,
            max_restarts: 3,
            restart_in: Duration::ZERO,
            log_file: None,
            repeats: Repeats::default(),
        }
    }

    /// A stall's end.
    fn fresh() -> Alert {
        Alert::Recovered {
            step: PipelineStep::Train,
            stalled_for: Some(Duration::from_secs(30)),
            training_step: Some(5),
        }
    }

    /// The first fresh heartbeat of a worker brought back after a crash.
    fn brought_back() -> Alert {
        Alert::Recovered {
            step: PipelineStep::Train,
            stalled_for: None,
            training_step: Some(5),
        }
    }

    fn over() -> Alert {
        Alert::IncidentOver {
            step: PipelineStep::Train,
            training_step: 9,
            after: Duration::from_secs(48),
            lost: Duration::from_secs(120),
            attempts: 3,
        }
    }

    #[test]
    fn one_push_per_incident_and_one_when_it_is_over() {
        let mut gate = Incident::default();
        let hung = Alert::HungRestarted {
            step: PipelineStep::Train,
            message: "hung".into(),
        };
        let pushed: Vec<bool> = [crashed(1), fresh(), crashed(2), hung, fresh(), over()]
            .iter()
            .map(|a| gate.admit(a))
            .collect();
        assert_eq!(pushed, [true, false, false, false, false, true]);
        // A new incident after the last one ended.
        assert!(gate.admit(&crashed(1)));
        let failed = Alert::Failed {
            step: PipelineStep::Train,
            reason: "gave up".into(),
            restarts: 3,
            last_exit: None,
            failure: None,
        };
        assert!(gate.admit(&failed), "giving up is the incident's end");
        // Outside an incident a fresh heartbeat after a stall is pushed.
        assert!(gate.admit(&fresh()));
        // A crash's end told by the decision log before the watchdog saw the brought
        // back worker's first fresh heartbeat: that heartbeat is not pushed again.
        assert!(gate.admit(&crashed(1)));
        assert!(gate.admit(&over()));
        assert!(!gate.admit(&brought_back()));
        // An incident the decision log closed without a push (an operator's stop):
        // the next crash is a new incident, pushed.
        assert!(gate.admit(&crashed(1)));
        let closed = Alert::IncidentClosed {
            text: "stopped at 07:00 before the outcome was known".into(),
        };
        assert!(gate.admit(&closed));
        assert!(gate.admit(&crashed(1)), "a crash after a stop is pushed");
    }
}
