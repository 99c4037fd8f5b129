//! `lavenderd attribute`: [`lavender_export::attribute`] on a run of the data root.

use std::process::ExitCode;

use anyhow::Result;
use lavender_export::attribute::{self, AttributeOptions};

use crate::cli::AttributeArgs;
use crate::settings::Settings;

pub fn run(settings: &Settings, args: AttributeArgs) -> Result<ExitCode> {
    // `--from-run` is the default: only its clash with `--train` is checked (by clap).
    let options = AttributeOptions {
        run: args.run,
        queries: args.queries,
        train: args.train,
        top: args.top,
        segments: args.segments,
        out: args.out,
        python: args.python,
        json: args.json,
        batch_tokens: args.batch_tokens,
        no_cache: args.no_cache,
        windows: args.windows,
    };
    attribute::run(&settings.layout.checkpoints_root(), &options)
}
