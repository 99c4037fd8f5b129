//! `notify.deadman`: the daemon requests a URL every `every_s` seconds while it is
//! healthy — the pipeline actor answers a round trip first, as for systemd's
//! watchdog — so an outside service (Healthchecks.io, any URL) alerts when the
//! requests stop: the daemon died (the OOM killer, a crash) or its actor wedged.
//! systemd's `WatchdogSec` restarts such a daemon but tells nobody; this tells.

use std::time::Duration;

use lavender::config::DeadmanConfig;
use tokio::time::MissedTickBehavior;

use crate::pipeline::PipelineHandle;

/// Starts the pings (none without `notify.deadman`).
pub(crate) fn spawn(config: Option<&DeadmanConfig>, pipeline: PipelineHandle) {
    let Some(config) = config.cloned() else {
        return;
    };
    let every = Duration::from_secs(config.every_s.max(1));
    // A request that hangs must not delay the next: it gets at most one period.
    let client = match reqwest::Client::builder()
        .timeout(every.min(Duration::from_secs(30)))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("notify.deadman: cannot make an HTTP client: {e}; no pings");
            return;
        }
    };
    tracing::info!(url = %config.url, "notify.deadman: pinging every {every:?} while healthy");
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Said once per change, not once per period.
        let mut failing = false;
        loop {
            tick.tick().await;
            let healthy = tokio::time::timeout(every, pipeline.ping())
                .await
                .unwrap_or(false);
            if !healthy {
                tracing::error!(
                    "notify.deadman: the pipeline actor did not answer within {every:?}; withholding the ping"
                );
                continue;
            }
            let problem = match client.get(&config.url).send().await {
                Ok(r) if r.status().is_success() => None,
                Ok(r) => Some(format!("answered {}", r.status())),
                Err(e) => Some(e.to_string()),
            };
            match (problem, failing) {
                (None, true) => {
                    tracing::info!("notify.deadman: {} answers again", config.url);
                    failing = false;
                }
                (Some(problem), false) => {
                    tracing::warn!("notify.deadman: {}: {problem}", config.url);
                    failing = true;
                }
                _ => {}
            }
        }
    });
}
