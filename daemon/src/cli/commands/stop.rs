//! `lavenderd stop`: the daemon stops the worker and says what the stop saved.
//! Exit code 0: a checkpoint was saved by the stop, or nothing had trained since the
//! last save; 3: stopped without saving what it trained; 4: nothing was running.

use std::process::ExitCode;

use anyhow::{Result, bail};

use lavender_api::endpoint::Stop;
use lavender_api::{StopReport, StopRequest};

use crate::client::Client;
use crate::settings::Settings;

pub const EXIT_NOT_SAVED: u8 = 3;
pub const EXIT_NOT_RUNNING: u8 = 4;

pub async fn run(settings: &Settings, timeout: Option<f64>) -> Result<ExitCode> {
    let client = Client::new(&settings.layout.socket());
    if !client.is_up().await {
        if let Some(pid) = crate::daemon::lock::holder(&settings.layout) {
            bail!(
                "lavenderd (pid {pid}) holds {} but does not answer on {}",
                settings.layout.state_dir.display(),
                settings.layout.socket().display()
            );
        }
        let root = settings.layout.checkpoints_root();
        let latest = lavender::checkpoint::newest_complete(None, &root).map(|c| c.path);
        let report = StopReport::idle(latest);
        println!("no daemon is running; {}", report.message);
        return Ok(ExitCode::from(EXIT_NOT_RUNNING));
    }
    let body = StopRequest { timeout_s: timeout };
    let report = client.call::<Stop>(&body).await?.ok()?;
    println!("{}", report.message);
    Ok(if !report.was_running {
        ExitCode::from(EXIT_NOT_RUNNING)
    } else if report.saved_checkpoint.is_some() || report.nothing_to_save {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_NOT_SAVED)
    })
}
