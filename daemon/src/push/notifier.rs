//! The handle the daemon holds: queue a push for every channel, read the counts,
//! send test pushes. Cheap to clone; the delivery tasks end when the last clone drops.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lavender::config::NotifyConfig;
use tokio::time::Instant;

use super::channel::{self, Channel};
use super::message::{Level, Notification};
use super::queue::{self, ChannelCounts, Lane, Policy, Timings};

/// What [`Notifier::start_with`] takes beyond the config: what tests inject, which
/// the config cannot say ([`Options::from_config`] is the daemon's).
#[derive(Debug, Clone)]
pub struct Options {
    pub timings: Timings,
    /// Use this program, called like `notify-send`, as the desktop channel (tests).
    pub desktop_program: Option<PathBuf>,
}

impl Options {
    pub fn from_config(cfg: &NotifyConfig) -> Options {
        Options {
            timings: Timings::from_config(cfg),
            desktop_program: None,
        }
    }
}

#[derive(Clone)]
pub struct Notifier {
    shared: Arc<Shared>,
}

struct Shared {
    lanes: Vec<Arc<Lane>>,
    off: Vec<(String, String)>,
    prefix: String,
    milestones: bool,
    timings: Timings,
    http: Option<reqwest::Client>,
    /// Kind and time of the last alert let through, for coalescing.
    last_alert: Mutex<Option<(String, Instant)>>,
    /// Told whenever a channel's counts change.
    counted: Arc<tokio::sync::watch::Sender<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for lane in &self.lanes {
            lane.close();
        }
    }
}

impl Notifier {
    /// Starts one delivery task per configured channel on the current tokio runtime.
    pub fn start(cfg: &NotifyConfig, state_dir: &Path) -> Notifier {
        Notifier::start_with(cfg, state_dir, Options::from_config(cfg))
    }

    pub fn start_with(cfg: &NotifyConfig, state_dir: &Path, options: Options) -> Notifier {
        let mut channels = channel::configured(cfg, state_dir, options.desktop_program.as_deref());
        let http = reqwest::Client::builder()
            .user_agent(concat!("lavenderd/", env!("CARGO_PKG_VERSION")))
            .build();
        let http = match http {
            Ok(client) => Some(client),
            Err(e) => {
                // Without an HTTP client only the desktop channel can work.
                let why = format!("no HTTP client: {e}");
                let (keep, lose) = channels
                    .on
                    .into_iter()
                    .partition(|(_, c)| matches!(c, Channel::Desktop(_)));
                channels.on = keep;
                let lost: Vec<(String, Channel)> = lose;
                channels
                    .off
                    .extend(lost.into_iter().map(|(name, _)| (name, why.clone())));
                None
            }
        };
        let counted = Arc::new(tokio::sync::watch::channel(()).0);
        let lanes: Vec<Arc<Lane>> = channels
            .on
            .into_iter()
            .map(|(name, channel)| Lane::new(name, channel, counted.clone()))
            .collect();
        let policy = Policy {
            attempts: cfg.attempts,
            max_per_window: cfg.max_per_minute,
            timings: options.timings.clone(),
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                for lane in &lanes {
                    rt.spawn(queue::run(lane.clone(), http.clone(), policy.clone()));
                }
            }
            Err(_) => tracing::error!(
                "notify: started outside a tokio runtime; pushes will queue but not be delivered"
            ),
        }
        let names: Vec<&str> = lanes.iter().map(|l| l.name.as_str()).collect();
        let off: Vec<String> = channels
            .off
            .iter()
            .map(|(name, why)| format!("{name} ({why})"))
            .collect();
        tracing::info!(
            "notify: channels on: {}; off: {}",
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            },
            if off.is_empty() {
                "none".into()
            } else {
                off.join(", ")
            }
        );
        Notifier {
            shared: Arc::new(Shared {
                lanes,
                off: channels.off,
                prefix: cfg.prefix.clone(),
                milestones: cfg.milestones,
                timings: options.timings,
                http,
                last_alert: Mutex::new(None),
                counted,
            }),
        }
    }

    /// The text every push starts with (`notify.prefix`).
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// The channels that are on, in order.
    pub fn channels(&self) -> Vec<String> {
        self.shared.lanes.iter().map(|l| l.name.clone()).collect()
    }

    /// Queues `n` for every channel. Never waits for delivery.
    pub fn send(&self, n: Notification) {
        let shared = &self.shared;
        match n.level {
            Level::Milestone if !shared.milestones => return,
            Level::Milestone => {}
            Level::Alert => {
                let now = Instant::now();
                let mut last = shared.last_alert.lock().unwrap_or_else(|e| e.into_inner());
                let repeat = last.as_ref().is_some_and(|(kind, at)| {
                    *kind == n.kind && now.duration_since(*at) < shared.timings.coalesce_window
                });
                if repeat {
                    tracing::debug!("notify: coalesced a repeated `{}` alert", n.kind);
                    for lane in &shared.lanes {
                        lane.count_dropped();
                    }
                    return;
                }
                *last = Some((n.kind.clone(), now));
            }
        }
        for lane in &shared.lanes {
            lane.push(n.clone());
        }
    }

    /// Sent, failed and dropped pushes per channel that is on.
    pub fn counts(&self) -> BTreeMap<String, ChannelCounts> {
        self.shared
            .lanes
            .iter()
            .map(|l| (l.name.clone(), l.counts()))
            .collect()
    }

    /// Changes whenever [`Notifier::counts`] would answer differently.
    pub fn subscribe_counts(&self) -> tokio::sync::watch::Receiver<()> {
        self.shared.counted.subscribe()
    }

    /// Sends one test push through each channel that is on (or just `channel`),
    /// one attempt each, bypassing queue, rate limit and counts; returns each
    /// server's answer or the error.
    pub async fn test(&self, channel: Option<&str>) -> Vec<(String, Result<String, String>)> {
        let shared = &self.shared;
        let n = Notification::alert(
            "test",
            format!("{}test push", shared.prefix),
            "lavenderd notify test: if you read this, the channel works.",
        );
        let lanes: Vec<&Arc<Lane>> = shared
            .lanes
            .iter()
            .filter(|l| channel.is_none_or(|c| c == l.name))
            .collect();
        if let (Some(name), true) = (channel, lanes.is_empty()) {
            let why = match shared.off.iter().find(|(n, _)| n == name) {
                Some((_, why)) => format!("the {name} channel is off: {why}"),
                None => {
                    let mut known: Vec<&str> =
                        shared.lanes.iter().map(|l| l.name.as_str()).collect();
                    known.extend(shared.off.iter().map(|(n, _)| n.as_str()));
                    format!("no channel named `{name}`; channels: {}", known.join(", "))
                }
            };
            return vec![(name.to_string(), Err(why))];
        }
        let mut results = Vec::new();
        for lane in lanes {
            let answer = lane
                .channel
                .deliver(shared.http.as_ref(), &n, shared.timings.attempt_timeout)
                .await
                .map_err(|e| e.message);
            results.push((lane.name.clone(), answer));
        }
        results
    }
}
