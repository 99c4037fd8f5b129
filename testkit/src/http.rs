//! The one blocking HTTP/1.1 client of the tests: a request over TCP (the daemon's
//! port, Chromium's DevTools endpoint) or the daemon's Unix socket, answered with
//! the status, the head and the body (chunks decoded). The event stream's reader
//! (`sse.rs`) writes its request and decodes its chunks with the same functions.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// Longer than any request of the tests takes (a stop waits for the worker's save),
/// so that a server that never answers fails the test instead of hanging it.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Http {
    pub status: u16,
    /// The status line and headers, lowercased.
    pub head: String,
    pub body: String,
}

impl Http {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One request over TCP to `addr` (`host:port`); panics when nothing listens or answers.
pub fn tcp(addr: &str, method: &str, path: &str, body: Option<&str>, token: Option<&str>) -> Http {
    tcp_as(addr, addr, method, path, body, token)
}

/// [`tcp`] with `host` in the `Host` header (a browser sends the name in its URL).
pub fn tcp_as(
    addr: &str,
    host: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> Http {
    let mut s = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("connect to {addr} for {method} {path}: {e}"));
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    exchange(&mut s, host, method, path, body, token)
        .unwrap_or_else(|e| panic!("no HTTP answer to {method} {path} from {addr}: {e}"))
}

/// One request over the Unix socket; `None` when nothing answers there.
pub fn uds(socket: &Path, method: &str, path: &str, body: Option<&str>) -> Option<Http> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(READ_TIMEOUT)).ok()?;
    exchange(&mut s, "localhost", method, path, body, None).ok()
}

/// `GET path` over TCP.
pub fn get(addr: &str, path: &str) -> Http {
    tcp(addr, "GET", path, None, None)
}

/// `GET path` over TCP, which must answer 200 with JSON.
pub fn get_json(addr: &str, path: &str) -> Value {
    let r = get(addr, path);
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    serde_json::from_str(&r.body)
        .unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {}", r.body))
}

/// One connection kept open across requests, as a polling client keeps it: each
/// request goes out without `Connection: close`, and answers are read by their length.
pub struct KeepAlive<S> {
    stream: S,
    host: String,
    /// Bytes read past the last answer (the start of the next).
    pending: Vec<u8>,
}

impl KeepAlive<std::net::TcpStream> {
    pub fn tcp(addr: &str) -> KeepAlive<std::net::TcpStream> {
        let stream =
            std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        KeepAlive::over(stream, addr)
    }
}

impl KeepAlive<std::os::unix::net::UnixStream> {
    pub fn uds(socket: &Path) -> KeepAlive<std::os::unix::net::UnixStream> {
        let stream = std::os::unix::net::UnixStream::connect(socket)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", socket.display()));
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        KeepAlive::over(stream, "localhost")
    }
}

impl<S: Read + Write> KeepAlive<S> {
    fn over(stream: S, host: &str) -> KeepAlive<S> {
        KeepAlive {
            stream,
            host: host.to_string(),
            pending: Vec::new(),
        }
    }

    /// The text of a request on this connection (to send several at once, `write`).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        token: Option<&str>,
    ) -> String {
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        request(&self.host, method, path, &auth, body)
    }

    /// Sends `bytes` as they are (one or several requests, or part of one).
    pub fn write(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("write to the server: {e}"));
    }

    /// One request and its answer; panics if the server closes instead.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
        token: Option<&str>,
    ) -> Http {
        let text = self.request(method, path, body, token);
        self.write(text.as_bytes());
        self.answer()
    }

    /// The next answer on the connection.
    pub fn answer(&mut self) -> Http {
        let mut buf = [0u8; 65536];
        loop {
            if let Some((response, used)) = parse_sized(&self.pending) {
                self.pending.drain(..used);
                return response;
            }
            let n = self
                .stream
                .read(&mut buf)
                .unwrap_or_else(|e| panic!("read an answer: {e}"));
            assert!(
                n > 0,
                "the server closed the connection before answering: {:?}",
                String::from_utf8_lossy(&self.pending)
            );
            self.pending.extend_from_slice(&buf[..n]);
        }
    }

    /// Whether the server has closed the connection (after the answers read so far).
    pub fn closed_by_server(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(self.stream.read(&mut buf), Ok(0))
    }
}

/// The answer at the start of `raw` once its `Content-Length` bytes have come, and
/// how many bytes it took.
fn parse_sized(raw: &[u8]) -> Option<(Http, usize)> {
    let end = find(raw, b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("a kept-alive answer without content-length: {head}"));
    let used = end + 4 + length;
    let response = parse(raw.get(..used)?, false)?;
    Some((response, used))
}

/// The request's text; `headers` are extra header lines, each ending in `\r\n`.
pub(crate) fn request(
    host: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: Option<&str>,
) -> String {
    let body = body.unwrap_or("");
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn exchange<S: Read + Write>(
    s: &mut S,
    host: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> Result<Http, String> {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let headers = format!("Connection: close\r\n{auth}");
    s.write_all(request(host, method, path, &headers, body).as_bytes())
        .map_err(|e| e.to_string())?;
    // Read to the end of the body, not of the connection: some servers (Chromium's)
    // keep it open whatever the request asked.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        raw.extend_from_slice(&buf[..n]);
        let closed = n == 0;
        if let Some(response) = parse(&raw, closed) {
            return Ok(response);
        }
        if closed {
            return Err(format!(
                "the connection closed before the headers: {:?}",
                String::from_utf8_lossy(&raw)
            ));
        }
    }
}

/// The response in `raw` once it is complete: the body's length read, or its last
/// chunk, or (without either) the connection `closed`.
fn parse(raw: &[u8], closed: bool) -> Option<Http> {
    let end = find(raw, b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let rest = &raw[end + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        let mut pending = rest.to_vec();
        let mut body = Vec::new();
        if !dechunk(&mut pending, &mut body) && !closed {
            return None;
        }
        body
    } else {
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        match length {
            Some(length) if rest.len() >= length => rest[..length].to_vec(),
            _ if closed => rest.to_vec(),
            _ => return None,
        }
    };
    Some(Http {
        status,
        head,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Moves the complete chunks at the start of `raw` to `body`; true once the final
/// (empty) chunk came.
pub(crate) fn dechunk(raw: &mut Vec<u8>, body: &mut Vec<u8>) -> bool {
    loop {
        let Some(line_end) = find(raw, b"\r\n") else {
            return false;
        };
        let line = String::from_utf8_lossy(&raw[..line_end]);
        let size = line.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size, 16).unwrap_or_else(|_| panic!("bad chunk size {size:?}"));
        if size == 0 {
            return true;
        }
        let start = line_end + 2;
        if raw.len() < start + size + 2 {
            return false;
        }
        body.extend_from_slice(&raw[start..start + size]);
        raw.drain(..start + size + 2);
    }
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_complete_by_its_length_its_last_chunk_or_the_close() {
        let by_length: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert!(parse(&by_length[..by_length.len() - 1], false).is_none());
        let r = parse(by_length, false).unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));

        let chunked: &[u8] = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nnot\r\n6\r\n found\r\n0\r\n\r\n";
        assert!(parse(&chunked[..chunked.len() - 5], false).is_none());
        let r = parse(chunked, false).unwrap();
        assert_eq!((r.status, r.body.as_str()), (404, "not found"));
        assert!(r.head.contains("transfer-encoding: chunked"), "{}", r.head);

        let until_close: &[u8] = b"HTTP/1.1 200 OK\r\n\r\nall of it";
        assert!(parse(until_close, false).is_none());
        assert_eq!(parse(until_close, true).unwrap().body, "all of it");
    }
}
