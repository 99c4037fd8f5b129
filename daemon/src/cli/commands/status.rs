//! `lavenderd status [--json]`: from the daemon when one answers, else from the files.

use std::process::ExitCode;

use anyhow::Result;
use lavender::status::Status;

use crate::cli::client::Client;
use crate::settings::Settings;
use crate::status::StatusSettings;

pub async fn fetch(settings: &Settings) -> Result<Status> {
    let client = Client::new(&settings.layout.socket());
    if let Ok(resp) = client.request("GET", "/status", None).await
        && resp.status == 200
    {
        return resp.json();
    }
    crate::status::offline(
        &settings.layout,
        &StatusSettings::from_config(&settings.config),
    )
}

pub async fn run(settings: &Settings, json: bool) -> Result<ExitCode> {
    let status = fetch(settings).await?;
    if json {
        println!("{}", status.to_json_pretty());
    } else {
        print!("{}", status.to_text());
    }
    Ok(ExitCode::SUCCESS)
}
