//! `lavenderd reload`: the daemon reads its config file again (as on SIGHUP) and
//! answers, key by key, what changed and when it takes effect.

use std::process::ExitCode;

use anyhow::{Result, bail};

use lavender_api::endpoint::DaemonReload;

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
    let report = client.call::<DaemonReload>(&()).await?.ok()?;
    for line in report.lines() {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
