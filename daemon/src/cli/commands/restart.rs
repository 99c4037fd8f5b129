//! `lavenderd daemon restart`: restart the daemon alone (after an upgrade) while the
//! worker keeps training; waits until the new daemon answers and says whether it
//! re-adopted the worker.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use lavender_api::endpoint::{DaemonRestart, Healthz, Status};

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
    let before = client.call::<DaemonRestart>(&()).await?.ok()?;
    let pid = before.pid;
    let deadline = Instant::now() + RESTART_WAIT;
    let health = loop {
        if let Ok(r) = client.call::<Healthz>(&()).await
            && r.status == 200
            && let Ok(h) = r.reply()
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
            let status = client.call::<Status>(&()).await?.reply()?.status;
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
