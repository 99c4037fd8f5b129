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

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use lavender::failure::FailureKind;
use lavender::pipeline_step::{PipelineStep, STEPS, StepKind};

use cli::StepArgs;

#[derive(Parser)]
#[command(
    name = "lavender-worker",
    version,
    about = "lavender's training worker: data steps, trainer, generation",
    allow_external_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sample text from a checkpoint.
    Generate(Box<generate::GenerateArgs>),
    /// Print a checkpoint's logits for a token sequence as JSON.
    Logits(logits::LogitsArgs),
    /// A pipeline step (`lavender-worker <step> …`), parsed by [`parse_step`].
    #[command(external_subcommand)]
    Step(Vec<OsString>),
}

/// A pipeline step with its arguments, as its kind takes them.
enum StepRun {
    Data(PipelineStep, StepArgs),
    Train(train::TrainArgs),
    Mine(mine_hard::MineHardArgs),
}

/// The worker's command line: parses it and runs the step it names. Exits with the
/// code of the failure's kind (`lavender::failure`): a rejected argument is `config`
/// (78), an error the code who made it classified has its kind's code, anything else 1.
pub fn main() -> ExitCode {
    let parsed = parse(std::env::args_os()).and_then(|cli| match cli.command {
        Command::Step(argv) => parse_step(&argv).map(|step| Run::Step(Box::new(step))),
        Command::Generate(a) => Ok(Run::Generate(a)),
        Command::Logits(a) => Ok(Run::Logits(a)),
    });
    let todo = match parsed {
        Ok(todo) => todo,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit_code(FailureKind::Config)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(todo) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            exit_code(failure::failure_of(&e).kind)
        }
    }
}

/// The top-level command line; its `--help` lists the steps from the step table.
fn parse(argv: impl IntoIterator<Item = OsString>) -> Result<Cli, clap::Error> {
    let steps: Vec<String> = STEPS
        .iter()
        .map(|s| format!("  {:<13}{}", s.name, s.about))
        .collect();
    let command = Cli::command()
        .subcommand_value_name("STEP|COMMAND")
        .after_help(format!(
            "Pipeline steps (`lavender-worker <step> --help` for a step's options):\n{}",
            steps.join("\n")
        ));
    Cli::from_arg_matches(&command.try_get_matches_from(argv)?)
}

/// `<step> [options]`: the step name parsed into [`PipelineStep`], its options as the
/// step's kind takes them.
fn parse_step(argv: &[OsString]) -> Result<StepRun, clap::Error> {
    let name = argv
        .first()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let step: PipelineStep = name
        .parse()
        .map_err(|e: lavender::pipeline_step::NotAStep| {
            Cli::command().error(ErrorKind::InvalidSubcommand, e.to_string())
        })?;
    Ok(match step.kind() {
        StepKind::Data => StepRun::Data(step, step_args(step, argv)?),
        StepKind::Train => StepRun::Train(step_args(step, argv)?),
        StepKind::Mine => StepRun::Mine(step_args(step, argv)?),
    })
}

/// A step's options (`argv[0]` is the step's name) into its kind's argument type.
fn step_args<A: Args + FromArgMatches>(
    step: PipelineStep,
    argv: &[OsString],
) -> Result<A, clap::Error> {
    let command = clap::Command::new(step.as_str())
        .bin_name(format!("lavender-worker {step}"))
        .about(step.spec().about);
    A::from_arg_matches(&A::augment_args(command).try_get_matches_from(argv)?)
}

enum Run {
    Step(Box<StepRun>),
    Generate(Box<generate::GenerateArgs>),
    Logits(logits::LogitsArgs),
}

fn exit_code(kind: FailureKind) -> ExitCode {
    ExitCode::from(u8::try_from(kind.exit_code()).unwrap_or(1))
}

fn run(todo: Run) -> anyhow::Result<()> {
    match todo {
        Run::Step(step) => match *step {
            StepRun::Data(step, a) => data::run(step, &a),
            StepRun::Train(a) => train::run(a),
            StepRun::Mine(a) => {
                let run_dir = a.step.run_dir.clone();
                mine_hard::run(a).inspect_err(|e| {
                    if let Some(run_dir) = &run_dir {
                        failure::record_step_failure(run_dir, lavender::hard_examples::STEP, e);
                    }
                })
            }
        },
        Run::Generate(a) => generate::run(*a),
        Run::Logits(a) => logits::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn every_step_of_the_table_parses_as_its_kind_and_an_unknown_one_is_refused() {
        for spec in &STEPS {
            let line = format!(
                "lavender-worker {} --config c.yaml --data-root d",
                spec.name
            );
            let Command::Step(rest) = parse(argv(&line)).unwrap().command else {
                panic!("{} is not taken as a step", spec.name);
            };
            let parsed = parse_step(&rest).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            match (spec.kind, parsed) {
                (StepKind::Data, StepRun::Data(step, _)) => assert_eq!(step, spec.step),
                (StepKind::Train, StepRun::Train(_)) | (StepKind::Mine, StepRun::Mine(_)) => {}
                (kind, _) => panic!("{} ({kind:?}) parsed as another kind", spec.name),
            }
        }
        let Command::Step(rest) = parse(argv("lavender-worker trian --data-root d"))
            .unwrap()
            .command
        else {
            panic!("an unknown name is offered to the step parser");
        };
        let Err(e) = parse_step(&rest) else {
            panic!("trian parsed")
        };
        assert!(e.use_stderr());
        assert!(
            e.to_string()
                .contains("\"trian\" is not a pipeline step; the steps are downloads"),
            "{e}"
        );
        // A data step's options are its own: train's are refused there.
        let Command::Step(rest) = parse(argv("lavender-worker dedup --resume latest"))
            .unwrap()
            .command
        else {
            panic!("dedup is a step");
        };
        assert!(parse_step(&rest).is_err());
    }
}
