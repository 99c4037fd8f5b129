//! The `notify:` section: push notifications of milestones (silent) and alerts
//! (audible) through Bark, ntfy, webhooks and the desktop. Every key has a default,
//! so configs written before this section existed still load.
//!
//! Secrets (`bark.key`, `ntfy.token`) are read but never serialized, so a run's
//! resolved `config.yaml` does not carry them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, ConfigErrorKind};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// Put before every push text, e.g. `[lavender] run started (device=cpu)`.
    pub prefix: String,
    /// Push the milestones of `events.jsonl` (silently); false = alerts only.
    pub milestones: bool,
    /// At most this many pushes per channel per minute; more wait their turn.
    pub max_per_minute: u32,
    /// A repeat of the previous alert's kind within this many seconds is dropped.
    pub coalesce_s: u64,
    /// Seconds one delivery attempt may take.
    pub timeout_s: u64,
    /// Delivery attempts per push before it is dropped with one log line.
    pub attempts: u32,
    /// Seconds to wait before retry N; the last value repeats.
    pub retry_backoff_s: Vec<u64>,
    /// Lines of the worker log quoted in a crash alert.
    pub log_lines: usize,
    /// Free-space floor in MiB for the disk-low alert; the alert fires below
    /// max(2 × the last checkpoint's size, this floor).
    pub disk_floor_mib: u64,
    pub bark: BarkConfig,
    pub ntfy: NtfyConfig,
    pub webhooks: Vec<WebhookConfig>,
    /// Desktop notifications (`notify-send` on Linux, `osascript` on macOS) when present.
    pub desktop: bool,
    /// A dead-man's switch the daemon requests while it is healthy; null = none.
    pub deadman: Option<DeadmanConfig>,
}

/// `notify.deadman`: a URL (a Healthchecks.io check, any URL) requested every
/// `every_s` seconds while the pipeline actor answers; when the daemon dies or
/// wedges the requests stop, and the service watching them alerts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadmanConfig {
    pub url: String,
    #[serde(default = "default_deadman_every_s")]
    pub every_s: u64,
}

fn default_deadman_every_s() -> u64 {
    60
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            prefix: "[lavender] ".into(),
            milestones: true,
            max_per_minute: 10,
            coalesce_s: 1800,
            timeout_s: 5,
            attempts: 3,
            retry_backoff_s: vec![2, 10],
            log_lines: 15,
            disk_floor_mib: 1024,
            bark: BarkConfig::default(),
            ntfy: NtfyConfig::default(),
            webhooks: Vec::new(),
            desktop: true,
            deadman: None,
        }
    }
}

/// Bark (iOS). The key and server come from this section or from a `*.bark.env`
/// file (`BARK_KEY=…`, `BARK_SERVER=…`); no key anywhere = the channel is off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BarkConfig {
    /// The device key; wins over the env file's `BARK_KEY`. Never written to config.yaml.
    #[serde(skip_serializing)]
    pub key: Option<String>,
    /// Server URL; wins over `BARK_SERVER`; neither = `https://api.day.app`.
    pub server: Option<String>,
    /// The env file; null = the first `*.bark.env` in the daemon's state directory.
    pub env_file: Option<PathBuf>,
    /// Bark's `group`, which folds the pushes together on the phone.
    pub group: String,
    /// A URL the push opens when tapped (e.g. the status page); null = none.
    pub url: Option<String>,
}

impl Default for BarkConfig {
    fn default() -> Self {
        BarkConfig {
            key: None,
            server: None,
            env_file: None,
            group: "lavender".into(),
            url: None,
        }
    }
}

/// ntfy (<https://ntfy.sh> or a self-hosted server). No topic = the channel is off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NtfyConfig {
    pub server: String,
    pub topic: Option<String>,
    /// Bearer token for protected topics. Never written to config.yaml.
    #[serde(skip_serializing)]
    pub token: Option<String>,
}

impl Default for NtfyConfig {
    fn default() -> Self {
        NtfyConfig {
            server: "https://ntfy.sh".into(),
            topic: None,
            token: None,
        }
    }
}

/// A JSON webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Channel name in status and `notify test --channel`; null = `webhook`, `webhook2`, …
    #[serde(default)]
    pub name: Option<String>,
    pub url: String,
    #[serde(default)]
    pub format: WebhookFormat,
}

/// The body a webhook receives: `json` (lavender's fields), `slack` (`{"text"}`) or
/// `discord` (`{"content"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    #[default]
    Json,
    Slack,
    Discord,
}

impl NotifyConfig {
    /// The channel name of webhook `index`.
    pub fn webhook_name(&self, index: usize) -> String {
        match self.webhooks.get(index).and_then(|w| w.name.clone()) {
            Some(name) => name,
            None if index == 0 => "webhook".into(),
            None => format!("webhook{}", index + 1),
        }
    }
}

fn invalid(path: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(ConfigErrorKind::Invalid {
        path: path.to_string(),
        message: message.into(),
    })
}

fn http_url(path: &str, url: &str) -> Result<(), ConfigError> {
    if url.starts_with("https://") || url.starts_with("http://") {
        Ok(())
    } else {
        Err(invalid(
            path,
            format!("`{url}` is not an http(s) URL; write it like https://example.org/hook"),
        ))
    }
}

fn at_least_one(path: &str, value: u64) -> Result<(), ConfigError> {
    if value >= 1 {
        Ok(())
    } else {
        Err(ConfigError::new(ConfigErrorKind::OutOfRange {
            path: path.to_string(),
            value: value.to_string(),
            range: "1..".into(),
        }))
    }
}

pub(crate) fn validate(n: &NotifyConfig) -> Result<(), ConfigError> {
    at_least_one("notify.max_per_minute", n.max_per_minute.into())?;
    at_least_one("notify.timeout_s", n.timeout_s)?;
    at_least_one("notify.attempts", n.attempts.into())?;
    if n.attempts > 1 && n.retry_backoff_s.is_empty() {
        return Err(invalid(
            "notify.retry_backoff_s",
            "list at least one wait in seconds (e.g. [2, 10]) or set notify.attempts: 1",
        ));
    }
    if let Some(server) = &n.bark.server {
        http_url("notify.bark.server", server)?;
    }
    http_url("notify.ntfy.server", &n.ntfy.server)?;
    if let Some(topic) = &n.ntfy.topic
        && (topic.is_empty() || topic.contains('/'))
    {
        return Err(invalid(
            "notify.ntfy.topic",
            format!("`{topic}` is not a topic name; use letters, digits, - and _ (no /)"),
        ));
    }
    if let Some(d) = &n.deadman {
        http_url("notify.deadman.url", &d.url)?;
        at_least_one("notify.deadman.every_s", d.every_s)?;
    }
    let mut names = std::collections::HashSet::new();
    for (i, hook) in n.webhooks.iter().enumerate() {
        http_url(&format!("notify.webhooks[{i}].url"), &hook.url)?;
        let name = n.webhook_name(i);
        if ["bark", "ntfy", "desktop"].contains(&name.as_str()) || !names.insert(name.clone()) {
            return Err(invalid(
                &format!("notify.webhooks[{i}].name"),
                format!("channel name `{name}` is already taken; give each webhook its own name"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, LoadOptions, Origin};

    fn err(text: &str) -> ConfigError {
        Config::from_yaml_str(text, "my.yaml").expect_err("config should be rejected")
    }

    #[test]
    fn default_yaml_matches_struct_defaults() {
        // The struct defaults serve configs without the section; they must agree
        // with the documented ones.
        assert_eq!(Config::default().notify, NotifyConfig::default());
    }

    #[test]
    fn configs_without_the_section_still_load() {
        let without: String = Config::default()
            .to_yaml()
            .split("\nnotify:")
            .next()
            .unwrap()
            .to_string();
        assert!(!without.contains("notify"), "{without}");
        let back: Config = serde_saphyr::from_str(&without).unwrap();
        assert_eq!(back.notify, NotifyConfig::default());
        let partial: Config =
            serde_saphyr::from_str(&format!("{without}\nnotify:\n  ntfy:\n    topic: runs\n"))
                .unwrap();
        assert_eq!(partial.notify.ntfy.topic.as_deref(), Some("runs"));
        assert_eq!(partial.notify.ntfy.server, "https://ntfy.sh");
        assert_eq!(partial.notify.max_per_minute, 10);
    }

    #[test]
    fn secrets_are_read_but_never_written() {
        let c = Config::from_yaml_str(
            "notify:\n  bark: {key: SECRETKEY}\n  ntfy: {topic: t, token: tk_SECRET}\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.notify.bark.key.as_deref(), Some("SECRETKEY"));
        assert_eq!(c.notify.ntfy.token.as_deref(), Some("tk_SECRET"));
        let yaml = c.to_yaml();
        assert!(!yaml.contains("SECRET"), "{yaml}");
        assert_eq!(
            Config::from_yaml_str(&yaml, "t").unwrap().notify.ntfy.topic,
            Some("t".into())
        );
    }

    #[test]
    fn webhooks_and_env_layering() {
        let opts = LoadOptions {
            env: vec![("LAVENDER__NOTIFY__NTFY__TOPIC".into(), "box1".into())],
            overrides: vec![(
                "notify.webhooks".into(),
                "[{url: 'http://127.0.0.1:9/a', format: slack}, {url: 'https://x/b'}]".into(),
            )],
            ..Default::default()
        };
        let c = Config::load(&opts).unwrap();
        assert_eq!(c.notify.ntfy.topic.as_deref(), Some("box1"));
        assert_eq!(c.notify.webhooks[0].format, WebhookFormat::Slack);
        assert_eq!(c.notify.webhooks[1].format, WebhookFormat::Json);
        assert_eq!(c.notify.webhook_name(0), "webhook");
        assert_eq!(c.notify.webhook_name(1), "webhook2");
    }

    #[test]
    fn bad_values_are_located() {
        let e = err("notify:\n  ntfy:\n    server: ntfy.sh\n");
        assert_eq!(e.path(), Some("notify.ntfy.server"));
        assert!(
            matches!(&e.origin, Some(Origin::File { line: 3, .. })),
            "{e}"
        );
        assert!(e.to_string().contains("not an http(s) URL"), "{e}");

        let e = err("notify:\n  ntfy:\n    tpoic: x\n");
        assert_eq!(
            e.to_string(),
            "my.yaml:3:5: unknown key `notify.ntfy.tpoic` — did you mean `topic`?"
        );

        let e = err("notify:\n  max_per_minute: 0\n");
        assert_eq!(
            e.to_string(),
            "my.yaml:2:19: notify.max_per_minute: 0 is out of range (1..)"
        );

        let e = err("notify:\n  webhooks:\n    - {url: 'https://a', format: teams}\n");
        assert!(e.to_string().contains("unknown value `teams`"), "{e}");

        let e = err("notify:\n  webhooks:\n    - {url: 'https://a', name: bark}\n");
        assert_eq!(e.path(), Some("notify.webhooks[0].name"));

        let e = err("notify:\n  deadman: {url: hc-ping.com/abc}\n");
        assert_eq!(e.path(), Some("notify.deadman.url"));
        assert!(e.to_string().contains("not an http(s) URL"), "{e}");
        let e = err("notify:\n  deadman: {url: 'https://hc-ping.com/abc', every_s: 0}\n");
        assert_eq!(e.path(), Some("notify.deadman.every_s"));
        let c = Config::from_yaml_str(
            "notify:\n  deadman: {url: 'https://hc-ping.com/abc'}\n",
            "x.yaml",
        )
        .unwrap();
        assert_eq!(c.notify.deadman.unwrap().every_s, 60);
    }
}
