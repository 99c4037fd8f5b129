//! The alert sink: one `ALERT` log line per alert, and its pushes queued on the
//! notifier's channels.

use tokio::sync::mpsc;

use super::{Notifier, pushes};
use crate::alert::{Alert, AlertSender};

/// The sink: one `ALERT` log line per alert, and its pushes (if any) queued on
/// `notifier`. `log_lines`: lines of the worker log quoted in a crash push.
pub fn spawn_sink(notifier: Option<Notifier>, log_lines: usize) -> AlertSender {
    let (tx, mut rx) = mpsc::unbounded_channel::<Alert>();
    tokio::spawn(async move {
        let mut incident = super::incident::Incident::default();
        while let Some(alert) = rx.recv().await {
            if alert.is_bad_news() {
                tracing::warn!(target: crate::logging::ALERT_TARGET, "ALERT {alert}");
                crate::logs::story::say(&format!("ALERT {alert}"));
            } else {
                tracing::info!(target: crate::logging::ALERT_TARGET, "{alert}");
                crate::logs::story::say(&alert.to_string());
            }
            if !incident.admit(&alert) {
                tracing::info!(
                    "not pushed: {alert} (the daemon handles it; one push per incident, and one when it is over)"
                );
                continue;
            }
            if let Some(n) = &notifier {
                for push in pushes(&alert, n.prefix(), log_lines) {
                    n.send(push);
                }
            }
        }
    });
    tx
}
