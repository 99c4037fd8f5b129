//! `lavenderd status [--json]`: from the daemon when one answers, else from the files;
//! `--json` adds the `data_root` it read (path, how it was chosen) to the contract.

use std::process::ExitCode;

use anyhow::Result;
use lavender::compose::{FileFacts, Liveness, StatusSettings, compose};
use lavender::pipeline_file::PipelineRecord;
use lavender::status::Status;
use lavender_api::{ServedStatus, endpoint};

use crate::client::Client;
use crate::process::Alive;
use crate::settings::Settings;

/// From the daemon, `GET /status` whole; with no daemon, the contract from the files.
pub async fn fetch_served(settings: &Settings) -> Result<ServedStatus> {
    let client = Client::new(&settings.layout.socket());
    if let Ok(resp) = client.call::<endpoint::Status>(&()).await
        && resp.status == 200
    {
        return resp.reply();
    }
    let status = offline(settings)?;
    Ok(ServedStatus {
        status,
        extra: serde_json::Map::new(),
    })
}

/// The status from the files alone, composed as the daemon composes it: the record,
/// the worker's liveness probed once (pid + start time, or the Slurm job), heartbeat,
/// checkpoints, manifests, disk.
fn offline(settings: &Settings) -> Result<Status> {
    let layout = &settings.layout;
    let record = PipelineRecord::load(layout)?;
    let status_settings = StatusSettings::from_config(&settings.config);
    let disk = crate::filesystem::read(&layout.data_root);
    let facts = FileFacts::read(layout, &record, &status_settings, Some(disk));
    let alive = record.worker().is_some_and(|w| w.handle.is_alive());
    Ok(compose(
        &record,
        &facts,
        &status_settings,
        lavender::time::now_utc(),
        Liveness::Probed(alive),
    ))
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
