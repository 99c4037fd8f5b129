//! A reader of the daemon's Server-Sent Events (`GET /events`) over a plain TCP
//! socket, decoding the chunked body as it arrives.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http::{dechunk, find, request};

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
        let last = last_event_id
            .map(|id| format!("Last-Event-ID: {id}\r\n"))
            .unwrap_or_default();
        let headers = format!("Accept: text/event-stream\r\n{last}");
        stream
            .write_all(request(addr, "GET", "/events", &headers, None).as_bytes())
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

    /// The next event (comment-only blocks are skipped); `None` when the stream
    /// ended. Panics after `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Option<SseEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            let finished = dechunk(&mut self.raw, &mut self.body);
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
