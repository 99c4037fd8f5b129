//! lavender-worker: the pipeline's steps and the libtorch trainer. A library with one
//! entry, [`main`], so the package's tests can build it with the `test-hooks` feature
//! (a dev-dependency on itself); the binary's `main.rs` only calls it.

mod cli;
mod data;
mod failure;
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

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lavender::failure::FailureKind;

use cli::StepArgs;

#[derive(Parser)]
#[command(
    name = "lavender-worker",
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

/// The worker's command line: parses it and runs the step it names. Exits with the
/// code of the failure's kind (`lavender::failure`): a rejected argument is `config`
/// (78), an error the code who made it classified has its kind's code, anything else 1.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit_code(FailureKind::Config)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            exit_code(failure::failure_of(&e).kind)
        }
    }
}

fn exit_code(kind: FailureKind) -> ExitCode {
    ExitCode::from(u8::try_from(kind.exit_code()).unwrap_or(1))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Downloads(a) => data::run(data::DataStep::Downloads, &a),
        Command::Dedup(a) => data::run(data::DataStep::Dedup, &a),
        Command::Filter(a) => data::run(data::DataStep::Filter, &a),
        Command::BuildShards(a) => data::run(data::DataStep::BuildShards, &a),
        Command::Precompute(a) => data::run(data::DataStep::Precompute, &a),
        Command::Train(a) => train::run(a),
        Command::MineHard(a) => {
            let run_dir = a.step.run_dir.clone();
            mine_hard::run(a).inspect_err(|e| {
                if let Some(run_dir) = &run_dir {
                    failure::record_step_failure(run_dir, lavender::hard_examples::STEP, e);
                }
            })
        }
        Command::Generate(a) => generate::run(a),
        Command::Logits(a) => logits::run(a),
    }
}
