use clap::{Parser, Subcommand};

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
