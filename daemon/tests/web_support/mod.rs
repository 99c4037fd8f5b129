//! Helpers for the web tests: a Server-Sent Events reader over a plain TCP
//! socket (it decodes the chunked body as it arrives) and a small HTTP GET.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

impl SseEvent {
    /// The sequence number of `<boot>-<seq>`.
    pub fn seq(&self) -> Option<u64> {
        self.id.as_ref()?.rsplit_once('-')?.1.parse().ok()
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.data))
    }
}

pub struct SseClient {
    stream: TcpStream,
    /// Decoded body bytes not yet split into events.
    body: Vec<u8>,
    /// Raw bytes not yet decoded (a chunk in progress).
    raw: Vec<u8>,
    eof: bool,
}

impl SseClient {
    pub fn connect(addr: &str, last_event_id: Option<&str>) -> SseClient {
        let mut stream = TcpStream::connect(addr).unwrap();
        let extra = last_event_id
            .map(|id| format!("Last-Event-ID: {id}\r\n"))
            .unwrap_or_default();
        write!(
            stream,
            "GET /events HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n{extra}\r\n"
        )
        .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut client = SseClient {
            stream,
            body: Vec::new(),
            raw: Vec::new(),
            eof: false,
        };
        // Headers.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(end) = find(&client.raw, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&client.raw[..end]).to_ascii_lowercase();
                assert!(head.starts_with("http/1.1 200"), "{head}");
                assert!(head.contains("content-type: text/event-stream"), "{head}");
                assert!(head.contains("transfer-encoding: chunked"), "{head}");
                client.raw.drain(..end + 4);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no response headers from /events"
            );
            client.fill();
        }
        client
    }

    /// Reads more from the socket; false on EOF or timeout.
    fn fill(&mut self) -> bool {
        let mut buf = [0u8; 16384];
        match self.stream.read(&mut buf) {
            Ok(0) => {
                self.eof = true;
                false
            }
            Ok(n) => {
                self.raw.extend_from_slice(&buf[..n]);
                true
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
            Err(e) => {
                self.eof = true;
                eprintln!("events stream: {e}");
                false
            }
        }
    }

    /// Moves complete chunks from `raw` to `body`; true when the final chunk came.
    fn dechunk(&mut self) -> bool {
        loop {
            let Some(line_end) = find(&self.raw, b"\r\n") else {
                return false;
            };
            let size = std::str::from_utf8(&self.raw[..line_end]).unwrap().trim();
            let size = usize::from_str_radix(size.split(';').next().unwrap(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size {size:?}"));
            if size == 0 {
                return true;
            }
            let start = line_end + 2;
            if self.raw.len() < start + size + 2 {
                return false;
            }
            self.body.extend_from_slice(&self.raw[start..start + size]);
            self.raw.drain(..start + size + 2);
        }
    }

    /// The next event (comment-only blocks are skipped); `None` when the stream
    /// ended. Panics after `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Option<SseEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            let finished = self.dechunk();
            while let Some(end) = find(&self.body, b"\n\n") {
                let block = String::from_utf8(self.body[..end].to_vec()).unwrap();
                self.body.drain(..end + 2);
                if let Some(e) = parse_block(&block) {
                    return Some(e);
                }
            }
            if finished || self.eof {
                return None;
            }
            assert!(Instant::now() < deadline, "no event within {timeout:?}");
            self.fill();
        }
    }

    /// Events until one satisfies `pred` (included).
    pub fn until(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&SseEvent) -> bool,
    ) -> Vec<SseEvent> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let e = self.next(left).expect("the stream ended early");
            let done = pred(&e);
            out.push(e);
            if done {
                return out;
            }
        }
    }
}

fn parse_block(block: &str) -> Option<SseEvent> {
    let mut id = None;
    let mut event = None;
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.to_string()),
            "event" => event = Some(value.to_string()),
            "data" => data.push(value),
            _ => {}
        }
    }
    if event.is_none() && data.is_empty() {
        return None;
    }
    Some(SseEvent {
        id,
        event: event.unwrap_or_else(|| "message".into()),
        data: data.join("\n"),
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A GET over TCP: status, headers (lowercased) and body.
pub fn get(addr: &str, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    // Read to the end of the body: some servers (Chromium's) keep the connection open.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let end = loop {
        let n = s
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        raw.extend_from_slice(&buf[..n]);
        match find(&raw, b"\r\n\r\n") {
            Some(end) => {
                let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                let chunked_done =
                    head.contains("transfer-encoding: chunked") && raw.ends_with(b"0\r\n\r\n");
                if n == 0 || chunked_done || length.is_some_and(|l| raw.len() - end - 4 >= l) {
                    break end;
                }
            }
            None => assert!(n > 0, "GET {path}: connection closed before the headers"),
        }
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = raw[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        while let Some(le) = find(&body, b"\r\n") {
            let n = usize::from_str_radix(std::str::from_utf8(&body[..le]).unwrap().trim(), 16)
                .unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&body[le + 2..le + 2 + n]);
            body.drain(..le + 2 + n + 2);
        }
        body = out;
    }
    (status, head, body)
}

pub fn get_json(addr: &str, path: &str) -> Value {
    let (status, _, body) = get(addr, path);
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "GET {path}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {text}"))
}
