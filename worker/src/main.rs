use clap::Parser as _;

fn main() -> anyhow::Result<()> {
    lavender_worker::run(lavender_worker::Cli::parse())
}
