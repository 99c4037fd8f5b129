//! `lavenderd status [--json]`: from the daemon when one answers, else from the files;
//! `--json` adds the `data_root` it read (path, how it was chosen) to the contract.

use std::process::ExitCode;

use anyhow::Result;
use lavender::status::Status;
use lavender_api::{Route, ServedStatus};

use crate::client::Client;
use crate::settings::Settings;
use crate::status::StatusSettings;

/// From the daemon, `GET /status` whole; with no daemon, the contract from the files.
pub async fn fetch_served(settings: &Settings) -> Result<ServedStatus> {
    let client = Client::new(&settings.layout.socket());
    if let Ok(resp) = client.request(Route::Status).await
        && resp.status == 200
    {
        return resp.json();
    }
    let status = crate::status::offline(
        &settings.layout,
        &StatusSettings::from_config(&settings.config),
    )?;
    Ok(ServedStatus {
        status,
        extra: serde_json::Map::new(),
    })
}

pub async fn fetch(settings: &Settings) -> Result<Status> {
    Ok(fetch_served(settings).await?.status)
}

pub async fn run(settings: &Settings, json: bool) -> Result<ExitCode> {
    let mut served = fetch_served(settings).await?;
    if json {
        // The contract allows keys beside its own (the daemon adds `notifications`):
        // which data root was read, and how it was chosen.
        served
            .extra
            .insert("data_root".into(), settings.data_root.to_json());
        println!("{}", serde_json::to_string_pretty(&served)?);
    } else {
        print!("{}", served.status.to_text());
    }
    Ok(ExitCode::SUCCESS)
}
