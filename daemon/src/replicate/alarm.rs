//! The replication alert: one push when the copy off the machine falls behind (the
//! lag past `replicate.max_lag_s`) or uploads keep failing
//! ([`FAILURES_TO_ALERT`] in a row), and one when it has caught up again. Pure: a
//! watcher feeds it the status every tick; the open incident is its only state, so
//! the backoff's retries and a lag that stays high push nothing more.

use std::time::{Duration, Instant};

use super::state::ReplicationStatus;
use crate::alert::Alert;

/// Failed upload passes in a row that make an incident: one failure is often a
/// blip the backoff's next try mends (2 s, then 4 s: about 6 s of trouble).
pub(crate) const FAILURES_TO_ALERT: u32 = 3;

/// Whether an incident is open, and since when.
#[derive(Debug, Default)]
pub(crate) struct Alarm {
    open_since: Option<Instant>,
}

impl Alarm {
    /// The alert `status` (read at `now`) raises, if any: the incident's start or end.
    pub(crate) fn step(&mut self, status: &ReplicationStatus, now: Instant) -> Option<Alert> {
        let failing = status.consecutive_failures >= FAILURES_TO_ALERT;
        let trouble = status.behind || failing || status.unavailable;
        match (self.open_since, trouble) {
            // What an operator must fix is said as such, at once.
            (None, true) if status.unavailable => {
                self.open_since = Some(now);
                Some(Alert::ReplicationUnavailable {
                    target: status.target.clone(),
                    reason: status.last_error.clone().unwrap_or_default(),
                })
            }
            (None, true) => {
                self.open_since = Some(now);
                Some(Alert::ReplicationBehind {
                    target: status.target.clone(),
                    lag_s: status.lag_s,
                    lag_steps: status.lag_steps,
                    max_lag_s: status.max_lag_s,
                    failures: status.consecutive_failures,
                    last_error: status.last_error.clone(),
                })
            }
            // Caught up: no failure now and the lag under its limit.
            (Some(since), false) if status.consecutive_failures == 0 => {
                self.open_since = None;
                Some(Alert::ReplicationRecovered {
                    target: status.target.clone(),
                    after: now.saturating_duration_since(since),
                    newest_remote: status.newest_remote.as_ref().map(|r| r.checkpoint.clone()),
                    lag_steps: status.lag_steps,
                })
            }
            _ => None,
        }
    }
}

/// How often the watcher reads the status: the lag grows with the clock, not with
/// events, so it is looked at on a timer.
pub(crate) const TICK: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    fn status(behind: bool, failures: u32) -> ReplicationStatus {
        ReplicationStatus {
            target: "s3://b/p".into(),
            behind,
            consecutive_failures: failures,
            lag_steps: Some(40),
            lag_s: Some(90.0),
            last_error: (failures > 0).then(|| "connection refused".into()),
            ..ReplicationStatus::default()
        }
    }

    #[test]
    fn one_push_per_incident_and_one_when_caught_up() {
        let t0 = Instant::now();
        let mut alarm = Alarm::default();
        // (behind, consecutive failures, the alert's kind or none)
        let table: &[(bool, u32, Option<&str>)] = &[
            (false, 0, None),
            (false, 1, None),
            (false, 2, None),
            (false, 3, Some("replication_behind")),
            (false, 4, None),
            (true, 9, None),
            // A pass that worked, the lag still past its limit: still open.
            (true, 0, None),
            // Under the limit but the last pass failed: not caught up yet.
            (false, 1, None),
            (false, 0, Some("replication_recovered")),
            (false, 0, None),
            // The lag alone opens an incident.
            (true, 0, Some("replication_behind")),
            (true, 0, None),
            (false, 0, Some("replication_recovered")),
        ];
        for (i, (behind, failures, want)) in table.iter().enumerate() {
            let now = t0 + Duration::from_secs(i as u64);
            let got = alarm.step(&status(*behind, *failures), now);
            assert_eq!(got.as_ref().map(Alert::name), *want, "row {i}");
        }
    }

    #[test]
    fn the_recovery_says_how_long_it_lasted() {
        let t0 = Instant::now();
        let mut alarm = Alarm::default();
        let opened = alarm.step(&status(false, 3), t0).unwrap();
        assert!(
            matches!(&opened, Alert::ReplicationBehind { failures: 3, last_error: Some(e), .. } if e == "connection refused"),
            "{opened:?}"
        );
        let over = alarm
            .step(&status(false, 0), t0 + Duration::from_secs(75))
            .unwrap();
        assert!(
            matches!(over, Alert::ReplicationRecovered { after, .. } if after == Duration::from_secs(75)),
            "{over:?}"
        );
    }

    #[test]
    fn a_target_that_needs_an_operator_is_said_at_once_as_unavailable() {
        let t0 = Instant::now();
        let mut alarm = Alarm::default();
        let refused = ReplicationStatus {
            unavailable: true,
            ..status(false, 1)
        };
        let opened = alarm.step(&refused, t0).unwrap();
        assert!(
            matches!(&opened, Alert::ReplicationUnavailable { reason, .. } if reason == "connection refused"),
            "{opened:?}"
        );
        // Still refused at later saves, then behind too: the same incident.
        assert_eq!(alarm.step(&refused, t0 + Duration::from_secs(1)), None);
        assert_eq!(
            alarm.step(&status(true, 4), t0 + Duration::from_secs(2)),
            None
        );
        let over = alarm.step(&status(false, 0), t0 + Duration::from_secs(3));
        assert_eq!(
            over.as_ref().map(Alert::name),
            Some("replication_recovered")
        );
    }
}
