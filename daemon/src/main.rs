use clap::{Parser, Subcommand};

// Wired into the supervisor and the `notify test` subcommand by the daemon; until
// then most of its API has no caller in the binary.
#[allow(dead_code, unused_imports)]
mod notify;

/// lavenderd: supervise a training pipeline.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a config file and print the resolved config.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Validate the config and print it fully resolved.
    Check,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Config {
            action: ConfigAction::Check,
        } => {
            println!("config check: not wired yet");
        }
    }
    Ok(())
}
