//! A webhook receiver on loopback: accepts POSTs, answers 200, and hands each body
//! with its arrival time to the caller.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc::{Receiver, channel};
use std::time::Instant;

pub struct Received {
    pub at: Instant,
    pub body: String,
}

/// Listens on `addr` in a background thread.
pub fn listen(addr: &str) -> Result<Receiver<Received>, String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("listen on {addr}: {e}"))?;
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            let body = loop {
                let Ok(n) = s.read(&mut chunk) else {
                    break None;
                };
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf);
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len = head
                        .lines()
                        .filter_map(|l| l.split_once(':'))
                        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if body.len() >= len {
                        break Some(body.to_string());
                    }
                }
            };
            let at = Instant::now();
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            if let Some(body) = body
                && tx.send(Received { at, body }).is_err()
            {
                return;
            }
        }
    });
    Ok(rx)
}
