//! `lavenderd attribute`: [`lavender_export::attribute`] over the data root's runs.

use std::process::ExitCode;

use anyhow::Result;
pub use lavender_export::attribute::BATCH_TOKENS;
use lavender_export::attribute::{self, AttributeArgs};

use crate::settings::Settings;

pub fn run(settings: &Settings, args: &AttributeArgs) -> Result<ExitCode> {
    attribute::run(&settings.layout.checkpoints_root(), args)
}
