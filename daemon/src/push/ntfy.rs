//! ntfy: `POST <server>/<topic>` with the text as body and `Title`, `Priority`
//! (milestones low, alerts high) and `Tags` headers; optional bearer token.

use lavender::config::NtfyConfig;
use reqwest::header::HeaderValue;

use super::delivery::{self, DeliveryError};
use super::message::{Level, Notification};

pub(super) struct Ntfy {
    url: String,
    token: Option<String>,
}

/// A header value from text: control characters (newlines) become spaces; UTF-8
/// goes through as bytes, which ntfy reads as UTF-8.
fn header(text: &str) -> Option<HeaderValue> {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    HeaderValue::from_bytes(clean.trim().as_bytes()).ok()
}

impl Ntfy {
    /// The channel, or `None` when no topic is set.
    pub fn from_config(cfg: &NtfyConfig) -> Option<Ntfy> {
        let topic = cfg.topic.as_deref().filter(|t| !t.is_empty())?;
        Some(Ntfy {
            url: format!("{}/{topic}", cfg.server.trim_end_matches('/')),
            token: cfg.token.clone().filter(|t| !t.is_empty()),
        })
    }

    pub async fn deliver(
        &self,
        http: &reqwest::Client,
        n: &Notification,
    ) -> Result<String, DeliveryError> {
        let (priority, tags) = match n.level {
            Level::Milestone => ("low", n.kind.clone()),
            Level::Alert => ("high", format!("warning,{}", n.kind)),
        };
        let body = if n.body.is_empty() { &n.title } else { &n.body };
        let mut req = http
            .post(&self.url)
            .header("Priority", priority)
            .body(body.clone());
        if let Some(tags) = header(&tags) {
            req = req.header("Tags", tags);
        }
        if !n.title.is_empty()
            && !n.body.is_empty()
            && let Some(title) = header(&n.title)
        {
            req = req.header("Title", title);
        }
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let (status, body) = delivery::send(req).await?;
        delivery::judge(status, &body)
    }
}
