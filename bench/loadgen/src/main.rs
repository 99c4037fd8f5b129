//! `loadgen load | detect-crash | detect-heartbeat | retention [--key value …]`;
//! see each module for its flags. Results are printed as JSON on stdout.

use lavender_loadgen::{args::Args, detect, load, retention};

const USAGE: &str =
    "usage: loadgen <load|detect-crash|detect-heartbeat|retention> [--key value ...]
  load              --tcp HOST:PORT | --unix SOCKET  [--path /status] [--method GET] [--body B]
                    [--header 'K: V']... [--connections 1] [--duration 10] [--warmup 1] [--rate R]
  detect-crash      --tcp|--unix  [--repeat 10] [--hook 127.0.0.1:PORT] [--timeout 30]
  detect-heartbeat  --tcp|--unix  --run-dir DIR [--repeat 20]
  retention         [--checkpoints 1000] [--keep 3] [--repeat 5] [--bytes 4096] [--dir TMP]";

fn main() {
    let mut raw = std::env::args().skip(1);
    let Some(cmd) = raw.next() else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    let result = Args::parse(raw).and_then(|args| match cmd.as_str() {
        "load" => load::run(&args),
        "detect-crash" => detect::crash(&args),
        "detect-heartbeat" => detect::heartbeat(&args),
        "retention" => retention::run(&args),
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    });
    if let Err(e) = result {
        eprintln!("loadgen {cmd}: {e}");
        std::process::exit(1);
    }
}
