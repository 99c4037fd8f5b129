//! A small blocking HTTP/1.1 client for the daemon's TCP port and Unix socket.

use std::io::{Read, Write};
use std::path::Path;

use serde_json::Value;

pub struct Http {
    pub status: u16,
    pub body: String,
}

impl Http {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One request over TCP to `addr` (`host:port`); panics when nothing listens.
pub fn tcp(addr: &str, method: &str, path: &str, body: Option<&str>, token: Option<&str>) -> Http {
    let mut s = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("connect to the daemon at {addr}: {e}"));
    request(&mut s, method, path, body, token)
        .unwrap_or_else(|| panic!("no HTTP answer to {method} {path} from {addr}"))
}

/// One request over the Unix socket; `None` when nothing answers there.
pub fn uds(socket: &Path, method: &str, path: &str, body: Option<&str>) -> Option<Http> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    request(&mut s, method, path, body, None)
}

fn request<S: Read + Write>(
    s: &mut S,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> Option<Http> {
    let body = body.unwrap_or("");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head
        .lines()
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some(Http { status, body })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}
