//! lavender-worker: the pipeline's steps and the libtorch trainer.

mod cli;
mod data;
mod generate;
mod hard_examples;
mod logits;
mod mine_hard;
mod model;
mod native;
mod optim;
mod progress;
mod tokens;
mod train;

use clap::{Parser, Subcommand};
use lavender::failure::FailureKind;

use cli::StepArgs;

#[derive(Parser)]
#[command(
    version,
    about = "lavender's training worker: data steps, trainer, generation"
)]
struct Cli {
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

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            std::process::ExitCode::from(exit_code(&e))
        }
    }
}

/// A rejected config says so in the exit code too (the daemon does not retry it),
/// for when neither heartbeat nor event could be written.
fn exit_code(e: &anyhow::Error) -> u8 {
    let kind = if e.chain().any(|c| c.is::<lavender::config::ConfigError>()) {
        FailureKind::Config
    } else {
        FailureKind::Crash
    };
    u8::try_from(kind.exit_code()).unwrap_or(1)
}

fn run(cli: Cli) -> anyhow::Result<()> {
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
