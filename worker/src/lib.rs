//! lavender-worker: the pipeline's steps and the libtorch trainer. A library with one
//! entry, [`run`], so the package's tests can build it with the `test-hooks` feature
//! (a dev-dependency on itself); `main.rs` parses the command line and calls it.

mod cli;
mod data;
mod generate;
mod hard_examples;
mod logits;
mod mine_hard;
mod model;
mod optim;
mod progress;
mod tokens;
mod train;

use clap::{Parser, Subcommand};

use cli::StepArgs;

#[derive(Parser)]
#[command(
    name = "lavender-worker",
    version,
    about = "lavender's training worker: data steps, trainer, generation"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Gather the corpus into <data_root>/corpus/.
    Downloads(StepArgs),
    /// Remove duplicate documents.
    Dedup(StepArgs),
    /// Apply the quality rules.
    Filter(StepArgs),
    /// Pack documents into shards with a manifest.
    #[command(name = "build_shards")]
    BuildShards(StepArgs),
    /// Train the tokenizer and encode shards, SFT and DPO sets into token arrays.
    Precompute(StepArgs),
    /// Train pretrain → sft → dpo with checkpoints, heartbeat and events.
    Train(train::TrainArgs),
    /// Score training windows and keep the hardest.
    #[command(name = "mine_hard")]
    MineHard(mine_hard::MineHardArgs),
    /// Sample text from a checkpoint.
    Generate(generate::GenerateArgs),
    /// Print a checkpoint's logits for a token sequence as JSON.
    Logits(logits::LogitsArgs),
}

/// Runs the step `cli` names.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Downloads(a) => data::run(data::DataStep::Downloads, &a),
        Command::Dedup(a) => data::run(data::DataStep::Dedup, &a),
        Command::Filter(a) => data::run(data::DataStep::Filter, &a),
        Command::BuildShards(a) => data::run(data::DataStep::BuildShards, &a),
        Command::Precompute(a) => data::run(data::DataStep::Precompute, &a),
        Command::Train(a) => train::run(a),
        Command::MineHard(a) => mine_hard::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Logits(a) => logits::run(a),
    }
}
