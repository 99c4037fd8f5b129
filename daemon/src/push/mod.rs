//! Push notifications: silent milestones from a run's `events.jsonl` and audible
//! alerts from the supervisor, delivered through Bark, ntfy, webhooks and the
//! desktop without ever blocking supervision.
//!
//! # API (what the supervisor and CLI use)
//!
//! ```text
//! Notifier::start(&cfg.notify, &state_dir) -> Notifier       // spawns one delivery task per channel (needs a tokio runtime)
//! Notifier::start_with(&cfg.notify, &state_dir, Options)     // the same with injected timings / desktop program (tests)
//! notifier.send(Notification)                                // never blocks: queues for every channel
//! notifier.counts() -> BTreeMap<channel, ChannelCounts { sent, failed, dropped }>   // for status
//! notifier.test(Option<&str>).await -> Vec<(channel, Result<server answer, error>)> // `lavenderd notify test`
//! notifier.prefix() -> &str
//!
//! pushes(&Alert, prefix, log_lines) -> Vec<Notification>    // an alert's push texts (a crash: crashed, restarting)
//! disk_low_need(last_checkpoint_bytes, floor_mib) -> bytes   // max(2 × last checkpoint, floor)
//! log_tail(&worker_log, n) -> Vec<String>                     // last lines for a crash alert
//!
//! milestone_text(&Event, prefix) -> Option<String>           // the seed's formats
//! milestone(&Event, prefix) -> Option<Notification>          // level: Milestone (Alert for `error` events)
//!
//! ```
//!
//! # Delivery rules
//!
//! - Each channel has its own queue and task, so a slow server delays only itself.
//!   Alerts leave the queue before milestones. A full queue (100) drops its oldest
//!   milestone (counted as `dropped`).
//! - At most `max_per_minute` pushes per channel in any rate window; more wait.
//! - An attempt times out after `timeout_s`; network errors, timeouts, 408, 429
//!   and 5xx are retried up to `attempts` times with `retry_backoff_s`; then one
//!   warning is logged and the push counts as `failed`. Other answers (a wrong
//!   Bark key: 400) are not retried.
//! - An alert of the same kind as the previous alert, within `coalesce_s`, is
//!   dropped: stalled, stalled, stalled → one push; stalled, recovered, stalled → three.
//! - A failure the daemon retries by itself is pushed once per incident, and its
//!   end once (recovered, given up, finished, stopped): `incident.rs`.
//! - Milestones are sent at most once: the follower persists its offset after
//!   queueing, so a daemon restart never resends them.
//! - A channel without its key/topic/program is off (a no-op, not an error).

mod alert_text;
mod bark;
mod channel;
mod delivery;
mod desktop;
pub(crate) mod format;
mod incident;
mod message;
mod notifier;
mod ntfy;
mod queue;
mod rate;
mod sink;
mod webhook;

pub use alert_text::{disk_low_need, log_tail, pushes};
pub use format::{milestone, milestone_text};
pub use message::{Level, Notification};
pub use notifier::{Notifier, Options};
pub use queue::{ChannelCounts, Timings};
pub use sink::spawn_sink;
