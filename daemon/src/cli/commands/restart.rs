//! `lavenderd daemon restart`: restart the daemon alone (after an upgrade) while the
//! worker keeps training; waits until the new daemon answers and says whether it
//! re-adopted the worker.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::Value;

use crate::client::Client;
use crate::settings::Settings;

/// How long the new daemon may take to answer.
const RESTART_WAIT: Duration = Duration::from_secs(60);

pub async fn run(settings: &Settings) -> Result<ExitCode> {
    let layout = &settings.layout;
    let client = Client::new(&layout.socket());
    if !client.is_up().await {
        bail!(
            "no daemon answers on {}; start one with `lavenderd serve` (or the service), which re-adopts a running worker",
            layout.socket().display()
        );
    }
    let resp = client.request("POST", "/daemon/restart", None).await?;
    if resp.status != 200 {
        bail!("{}", resp.error_text());
    }
    let before: Value = resp.json()?;
    let old_start = before["started_at"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pid = before["pid"].as_u64().unwrap_or_default();
    let deadline = Instant::now() + RESTART_WAIT;
    let health = loop {
        if let Ok(r) = client.request("GET", "/healthz", None).await
            && r.status == 200
            && let Ok(v) = r.json::<Value>()
            && v["started_at"].as_str().is_some_and(|s| s != old_start)
        {
            break v;
        }
        if Instant::now() > deadline {
            bail!(
                "lavenderd (pid {pid}) did not answer again within {RESTART_WAIT:?}; see its log ({}, or journalctl -u lavenderd.service)",
                layout.daemon_log().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let version = health["version"].as_str().unwrap_or("?");
    match before["worker_pid"].as_u64() {
        Some(worker) => {
            let status = client
                .request("GET", "/status", None)
                .await?
                .json::<Value>()?;
            let now = status["pipeline"]["pid"].as_u64();
            if now != Some(worker) {
                bail!(
                    "lavenderd {version} restarted (pid {pid}), but it does not show worker pid {worker} running (pipeline state {}); see `lavenderd status` and `lavenderd logs`",
                    status["pipeline"]["state"]
                );
            }
            println!(
                "lavenderd {version} restarted (pid {pid}); worker pid {worker} keeps training, re-adopted"
            );
        }
        None => println!(
            "lavenderd {version} restarted (pid {pid}); no worker was running (pipeline {})",
            health["state"].as_str().unwrap_or("?")
        ),
    }
    Ok(ExitCode::SUCCESS)
}
