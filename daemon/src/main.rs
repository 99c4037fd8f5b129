use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use lavenderd::cli::{Cli, commands};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(code) = cli.command.run_relay() {
        return code;
    }
    // In the foreground the lines go to the daemon log file, which wants no colours.
    lavenderd::logging::init(std::io::stderr().is_terminal() && !cli.command.is_foreground());
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
    match runtime.block_on(commands::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lavenderd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
