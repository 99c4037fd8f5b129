//! `lavenderd notify test [--channel NAME]`: one test push per configured channel,
//! sent from this process (no daemon needed), with each server's answer.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::push::Notifier;
use crate::settings::Settings;

pub async fn test(settings: &Settings, channel: Option<&str>) -> Result<ExitCode> {
    let notifier = Notifier::start(&settings.config.notify, &settings.layout.state_dir);
    let configured = notifier.channels();
    if configured.is_empty() {
        bail!(
            "no notification channel is configured: set notify.bark.key, notify.ntfy.topic, \
             notify.webhooks or notify.desktop in the config"
        );
    }
    if let Some(name) = channel
        && !configured.iter().any(|c| c == name)
    {
        bail!(
            "no channel named {name:?}; configured: {}",
            configured.join(", ")
        );
    }
    let answers = notifier.test(channel).await;
    let mut failed = answers.is_empty();
    for (name, answer) in &answers {
        match answer {
            Ok(reply) => println!("{name}: ok: {reply}"),
            Err(e) => {
                failed = true;
                println!("{name}: FAILED: {e}");
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
