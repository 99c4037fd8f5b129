//! Alerts into the feed: a tee in front of the existing alert sink, so every
//! alert is still logged (and later notified) and also streamed.

use serde_json::json;
use tokio::sync::mpsc;

use super::{Feed, Kind};
use crate::alert::{Alert, AlertSender};

/// Returns a sender that publishes each alert to `feed`, then passes it to `next`.
pub fn tee(feed: Feed, next: AlertSender) -> AlertSender {
    let (tx, mut rx) = mpsc::unbounded_channel::<Alert>();
    tokio::spawn(async move {
        while let Some(alert) = rx.recv().await {
            feed.publish(Kind::Alert, &to_json(&alert));
            let _ = next.send(alert);
        }
    });
    tx
}

pub fn to_json(alert: &Alert) -> serde_json::Value {
    json!({
        "ts": lavender::time::rfc3339_z(lavender::time::now_utc()),
        "kind": alert.name(),
        "step": alert.step(),
        "message": alert.to_string(),
    })
}
