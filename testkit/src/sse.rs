//! A reader of the daemon's Server-Sent Events (`GET /events`) over TCP, through
//! the one HTTP/1.1 client, its chunked body decoded as it arrives.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use lavender_client::{Connection, Request, Stream, Target};
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
    conn: Connection<Stream>,
    /// Decoded body bytes not yet split into events.
    body: Vec<u8>,
    eof: bool,
}

impl SseClient {
    pub fn connect(addr: &str, last_event_id: Option<&str>) -> SseClient {
        let mut request = Request::get("/events")
            .host(addr)
            .header("Accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let stream = Target::Tcp(addr.into())
            .connect()
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        // Short reads, so `next` can give up at its deadline.
        stream
            .set_timeouts(Some(Duration::from_millis(100)))
            .unwrap();
        let mut conn = Connection::new(stream);
        conn.write_all(request.render().bytes()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let head = loop {
            match conn.read_head(false) {
                Ok(head) => break head,
                Err(e) if timed_out(&e) && Instant::now() < deadline => {}
                Err(e) => panic!("no response headers from /events: {e}"),
            }
        };
        let text = head.text.to_ascii_lowercase();
        assert!(text.starts_with("http/1.1 200"), "{text}");
        assert!(text.contains("content-type: text/event-stream"), "{text}");
        assert!(text.contains("transfer-encoding: chunked"), "{text}");
        SseClient {
            conn,
            body: Vec::new(),
            eof: false,
        }
    }

    /// Decodes one more chunk into `body`; false on a timeout or the stream's end.
    fn fill(&mut self) -> bool {
        match self.conn.next_chunk() {
            Ok(Some(piece)) => {
                self.body.extend_from_slice(&piece);
                true
            }
            Ok(None) => {
                self.eof = true;
                false
            }
            Err(e) if timed_out(&e) => false,
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
            while let Some(end) = find(&self.body, b"\n\n") {
                let block = String::from_utf8(self.body[..end].to_vec()).unwrap();
                self.body.drain(..end + 2);
                if let Some(e) = parse_block(&block) {
                    return Some(e);
                }
            }
            if self.eof {
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

fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
