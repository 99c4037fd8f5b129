//! `status-reference --body FILE (--tcp 127.0.0.1:0 | --unix SOCKET) [--blocking]`:
//! the bare server bench/status compares lavenderd with. Axum 0.8 on tokio's
//! multi-threaded runtime, as lavenderd uses them, answering `GET /status` with the
//! bytes of FILE from a static string: no state, no clock, no serialization. Prints
//! the bound TCP address (or the socket path) on stdout once it listens.
//!
//! `--blocking` serves the same bytes without any framework or runtime: one thread
//! per connection, a blocking read until the request's blank line, one write of a
//! response prepared at start. It is the floor of what answering a request costs
//! the server process on this machine (the wake-up, the read, the write), which no
//! HTTP stack can go below.

use std::path::PathBuf;

use axum::Router;
use axum::http::header;
use axum::routing::get;

mod blocking;

const USAGE: &str =
    "usage: status-reference --body FILE (--tcp HOST:PORT | --unix SOCKET) [--blocking]";

pub enum Listen {
    Tcp(String),
    Unix(PathBuf),
}

fn parse() -> Result<(PathBuf, Listen, bool), String> {
    let mut body = None;
    let mut listen = None;
    let mut blocking = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--blocking" {
            blocking = true;
            continue;
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--body" => body = Some(PathBuf::from(value)),
            "--tcp" => listen = Some(Listen::Tcp(value)),
            "--unix" => listen = Some(Listen::Unix(PathBuf::from(value))),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    Ok((body.ok_or(USAGE)?, listen.ok_or(USAGE)?, blocking))
}

fn main() {
    let (body_file, listen, blocking) = parse().unwrap_or_else(|e| {
        eprintln!("status-reference: {e}");
        std::process::exit(2);
    });
    let body = std::fs::read_to_string(&body_file).unwrap_or_else(|e| {
        eprintln!("status-reference: cannot read {}: {e}", body_file.display());
        std::process::exit(1);
    });
    if blocking {
        blocking::serve(&body, listen);
    } else {
        serve_axum(body, listen);
    }
}

#[tokio::main]
async fn serve_axum(body: String, listen: Listen) {
    // Leaked once: the handler returns a `&'static str`, as a static route would.
    let body: &'static str = Box::leak(body.into_boxed_str());
    let app = Router::new().route(
        "/status",
        get(move || async move { ([(header::CONTENT_TYPE, "application/json")], body) }),
    );
    let served = match listen {
        Listen::Tcp(addr) => {
            let l = tokio::net::TcpListener::bind(&addr)
                .await
                .unwrap_or_else(|e| {
                    eprintln!("status-reference: cannot bind {addr}: {e}");
                    std::process::exit(1);
                });
            println!("{}", l.local_addr().expect("bound address"));
            axum::serve(l, app).await
        }
        Listen::Unix(path) => {
            let _ = std::fs::remove_file(&path);
            let l = tokio::net::UnixListener::bind(&path).unwrap_or_else(|e| {
                eprintln!("status-reference: cannot bind {}: {e}", path.display());
                std::process::exit(1);
            });
            println!("{}", path.display());
            axum::serve(l, app).await
        }
    };
    if let Err(e) = served {
        eprintln!("status-reference: {e}");
        std::process::exit(1);
    }
}
