//! The channels a push can go through, and what they share: one delivery attempt
//! with a timeout, and how an HTTP answer counts (success, retry, give up).

use std::path::Path;
use std::time::Duration;

use lavender::config::NotifyConfig;
use reqwest::{RequestBuilder, StatusCode};

use super::bark::Bark;
use super::desktop::Desktop;
use super::message::Notification;
use super::ntfy::Ntfy;
use super::webhook::Webhook;

/// Why one attempt failed, and whether another attempt could succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DeliveryError {
    pub message: String,
    pub retryable: bool,
}

impl DeliveryError {
    pub fn retry(message: impl Into<String>) -> Self {
        DeliveryError {
            message: message.into(),
            retryable: true,
        }
    }

    pub fn fatal(message: impl Into<String>) -> Self {
        DeliveryError {
            message: message.into(),
            retryable: false,
        }
    }
}

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

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

/// An error and its causes on one line (`error sending request …: Connection refused`).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}

/// Sends the request; `Ok` is the status and the body text, whatever the status.
pub(super) async fn send(req: RequestBuilder) -> Result<(StatusCode, String), DeliveryError> {
    let response = req
        .send()
        .await
        .map_err(|e| DeliveryError::retry(chain(&e)))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| DeliveryError::retry(format!("reading the answer: {}", chain(&e))))?;
    Ok((status, body))
}

/// Shortened for log lines.
pub(super) fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// 2xx is success; 408, 429 and 5xx may pass on a retry; any other answer will not.
pub(super) fn judge(status: StatusCode, body: &str) -> Result<String, DeliveryError> {
    let answer = format!("{} {}", status.as_u16(), clip(body, 300));
    if status.is_success() {
        Ok(answer.trim_end().to_string())
    } else if status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
    {
        Err(DeliveryError::retry(format!("server answered {answer}")))
    } else {
        Err(DeliveryError::fatal(format!("server answered {answer}")))
    }
}
