//! The channels a push can go through, chosen from the config; one attempt through
//! any of them, bounded by a timeout.

use std::path::Path;
use std::time::Duration;

use lavender::config::NotifyConfig;

use super::bark::Bark;
use super::delivery::DeliveryError;
use super::desktop::Desktop;
use super::message::Notification;
use super::ntfy::Ntfy;
use super::webhook::Webhook;

pub(super) enum Channel {
    Bark(Bark),
    Ntfy(Ntfy),
    Webhook(Webhook),
    Desktop(Desktop),
}

impl Channel {
    /// One attempt, bounded by `timeout`; `Ok` holds the server's answer.
    pub async fn deliver(
        &self,
        http: Option<&reqwest::Client>,
        n: &Notification,
        timeout: Duration,
    ) -> Result<String, DeliveryError> {
        let attempt = async {
            let http = || http.ok_or_else(|| DeliveryError::fatal("no HTTP client could be built"));
            match self {
                Channel::Bark(c) => c.deliver(http()?, n).await,
                Channel::Ntfy(c) => c.deliver(http()?, n).await,
                Channel::Webhook(c) => c.deliver(http()?, n).await,
                Channel::Desktop(c) => c.deliver(n).await,
            }
        };
        tokio::time::timeout(timeout, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(DeliveryError::retry(format!(
                    "no answer within {:.1} s",
                    timeout.as_secs_f64()
                )))
            })
    }
}

/// The channels the config turns on, by name, and the ones it leaves off with the
/// reason (for `notify test --channel NAME`).
pub(super) struct Channels {
    pub on: Vec<(String, Channel)>,
    pub off: Vec<(String, String)>,
}

pub(super) fn configured(
    cfg: &NotifyConfig,
    state_dir: &Path,
    desktop_program: Option<&Path>,
) -> Channels {
    let mut channels = Channels {
        on: Vec::new(),
        off: Vec::new(),
    };
    match Bark::from_config(&cfg.bark, state_dir) {
        Ok(bark) => channels.on.push(("bark".into(), Channel::Bark(bark))),
        Err(why) => channels.off.push(("bark".into(), why)),
    }
    match Ntfy::from_config(&cfg.ntfy) {
        Some(ntfy) => channels.on.push(("ntfy".into(), Channel::Ntfy(ntfy))),
        None => channels
            .off
            .push(("ntfy".into(), "no notify.ntfy.topic is set".into())),
    }
    for (i, hook) in cfg.webhooks.iter().enumerate() {
        channels.on.push((
            cfg.webhook_name(i),
            Channel::Webhook(Webhook::new(&hook.url, hook.format)),
        ));
    }
    let desktop = match desktop_program {
        Some(program) => Ok(Desktop::with_program(program)),
        None if cfg.desktop => Desktop::detect(),
        None => Err("notify.desktop is false".into()),
    };
    match desktop {
        Ok(d) => channels.on.push(("desktop".into(), Channel::Desktop(d))),
        Err(why) => channels.off.push(("desktop".into(), why)),
    }
    channels
}
