use std::process::ExitCode;

fn main() -> ExitCode {
    lavender_worker::main()
}
