//! JSON webhooks: `json` (lavender's fields plus `text`), `slack` (`{"text"}`) or
//! `discord` (`{"content"}`, at most 2,000 characters).

use lavender::config::WebhookFormat;
use serde_json::{Value, json};

use super::delivery::{self, DeliveryError};
use super::message::Notification;

/// Discord rejects longer contents.
const DISCORD_MAX_CHARS: usize = 2000;

pub(super) struct Webhook {
    url: String,
    format: WebhookFormat,
}

impl Webhook {
    pub fn new(url: &str, format: WebhookFormat) -> Webhook {
        Webhook {
            url: url.to_string(),
            format,
        }
    }

    pub(super) fn payload(&self, n: &Notification) -> Value {
        match self.format {
            WebhookFormat::Json => json!({
                "level": n.level,
                "kind": n.kind,
                "title": n.title,
                "body": n.body,
                "text": n.text(),
            }),
            WebhookFormat::Slack => json!({ "text": n.text() }),
            WebhookFormat::Discord => {
                let text = n.text();
                let content = match text.char_indices().nth(DISCORD_MAX_CHARS - 1) {
                    Some((at, _)) => format!("{}…", &text[..at]),
                    None => text,
                };
                json!({ "content": content })
            }
        }
    }

    pub async fn deliver(
        &self,
        http: &reqwest::Client,
        n: &Notification,
    ) -> Result<String, DeliveryError> {
        let req = http.post(&self.url).json(&self.payload(n));
        let (status, body) = delivery::send(req).await?;
        delivery::judge(status, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let n = Notification::alert("crashed", "[l] crashed: exit code 1", "oom");
        let hook = |f| Webhook::new("http://x", f).payload(&n);
        assert_eq!(
            hook(WebhookFormat::Slack),
            json!({"text": "[l] crashed: exit code 1\noom"})
        );
        assert_eq!(
            hook(WebhookFormat::Discord),
            json!({"content": "[l] crashed: exit code 1\noom"})
        );
        let j = hook(WebhookFormat::Json);
        assert_eq!(j["level"], "alert");
        assert_eq!(j["kind"], "crashed");
        assert_eq!(j["body"], "oom");
        let long = Notification::alert("crashed", "t", "x".repeat(5000));
        let content = Webhook::new("http://x", WebhookFormat::Discord).payload(&long);
        assert_eq!(content["content"].as_str().unwrap().chars().count(), 2000);
    }
}
