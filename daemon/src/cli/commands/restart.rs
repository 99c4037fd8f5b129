//! `lavenderd daemon restart`: restart the daemon alone (after an upgrade) while the
//! worker keeps training; waits until the new daemon answers and says whether it
//! re-adopted the worker.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use lavender_api::{Health, RestartReply, Route, ServedStatus};

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
    let resp = client.request(Route::DaemonRestart).await?;
    if resp.status != 200 {
        bail!("{}", resp.error_text());
    }
    let before: RestartReply = resp.json()?;
    let pid = before.pid;
    let deadline = Instant::now() + RESTART_WAIT;
    let health = loop {
        if let Ok(r) = client.request(Route::Healthz).await
            && r.status == 200
            && let Ok(h) = r.json::<Health>()
            && h.started_at != before.started_at
        {
            break h;
        }
        if Instant::now() > deadline {
            bail!(
                "lavenderd (pid {pid}) did not answer again within {RESTART_WAIT:?}; see its log ({}, or journalctl -u lavenderd.service)",
                layout.daemon_log().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let version = &health.version;
    match before.worker_pid {
        Some(worker) => {
            let status = client
                .request(Route::Status)
                .await?
                .json::<ServedStatus>()?
                .status;
            if status.pipeline.pid != Some(worker) {
                bail!(
                    "lavenderd {version} restarted (pid {pid}), but it does not show worker pid {worker} running (pipeline state {:?}); see `lavenderd status` and `lavenderd logs`",
                    status.pipeline.state.as_str()
                );
            }
            println!(
                "lavenderd {version} restarted (pid {pid}); worker pid {worker} keeps training, re-adopted"
            );
        }
        None => println!(
            "lavenderd {version} restarted (pid {pid}); no worker was running (pipeline {})",
            health.state
        ),
    }
    Ok(ExitCode::SUCCESS)
}
