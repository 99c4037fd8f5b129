use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use lavenderd::cli::{Cli, Invocation, commands};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = match cli.command {
        Invocation::LogRelay(relay) => return relay.run(),
        Invocation::Command(command) => command,
    };
    // In the foreground the lines go to the daemon log file, which wants no colours.
    lavenderd::logging::init(std::io::stderr().is_terminal() && !command.is_foreground());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lavenderd: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::dispatch(cli.global, command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lavenderd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
