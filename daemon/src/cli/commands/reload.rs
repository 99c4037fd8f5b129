//! `lavenderd reload`: the daemon reads its config file again (as on SIGHUP) and
//! answers, key by key, what changed and when it takes effect.

use std::process::ExitCode;

use anyhow::{Result, bail};

use lavender_api::{ReloadReport, Route};

use crate::client::Client;
use crate::settings::Settings;

pub async fn run(settings: &Settings) -> Result<ExitCode> {
    let layout = &settings.layout;
    let client = Client::new(&layout.socket());
    if !client.is_up().await {
        bail!(
            "no daemon answers on {}; a daemon reads the config when it starts (lavenderd start, or the service)",
            layout.socket().display()
        );
    }
    let resp = client.request(Route::DaemonReload).await?;
    if resp.status != 200 {
        bail!("{}", resp.error_text());
    }
    let report: ReloadReport = resp.json()?;
    for line in report.lines() {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
