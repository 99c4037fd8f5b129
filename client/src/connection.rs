//! Requests and answers on one stream, and a client that keeps one to a target.

use std::io::{self, Read, Write};
use std::time::Duration;

use crate::request::Rendered;
use crate::response::{Chunk, Framing, Head, Response, chunk, find};
use crate::target::{Stream, Target};

/// Bytes read at most per `read` call.
const READ_SIZE: usize = 16 * 1024;

/// One stream and the bytes read from it but not yet used (the start of the next
/// answer, when requests were pipelined). Reading stops cleanly at any point: what
/// is not yet a whole head or chunk stays buffered, so a read timeout (an event
/// stream polled with one) loses nothing.
pub struct Connection<S> {
    stream: S,
    buf: Vec<u8>,
    /// Where each `read` lands, allocated once (not zeroed again per read).
    scratch: Box<[u8]>,
}

impl<S: Read + Write> Connection<S> {
    pub fn new(stream: S) -> Connection<S> {
        Connection {
            stream,
            buf: Vec::with_capacity(READ_SIZE),
            scratch: vec![0; READ_SIZE].into_boxed_slice(),
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// Sends bytes as they are (one or several requests, or part of one).
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends `request` and reads its answer.
    pub fn exchange(&mut self, request: &Rendered) -> io::Result<Response> {
        self.stream.write_all(request.bytes())?;
        self.read_response(request.head_only)
    }

    /// The next whole answer on the stream (interim 1xx answers skipped).
    /// `head_only`: it answers a HEAD request.
    pub fn read_response(&mut self, head_only: bool) -> io::Result<Response> {
        let head = loop {
            let head = self.read_head(head_only)?;
            if !(100..200).contains(&head.status) || head.status == 101 {
                break head;
            }
        };
        let body = match head.framing {
            Framing::Empty => Vec::new(),
            Framing::Length(n) => {
                while self.buf.len() < n {
                    self.fill()?;
                }
                self.buf.drain(..n).collect()
            }
            Framing::Chunked => {
                let mut body = Vec::new();
                while let Some(piece) = self.next_chunk()? {
                    body.extend_from_slice(&piece);
                }
                body
            }
            Framing::UntilClose => {
                let mut body = std::mem::take(&mut self.buf);
                self.stream.read_to_end(&mut body)?;
                body
            }
        };
        Ok(Response {
            status: head.status,
            head,
            body,
        })
    }

    /// The next answer's head; its body stays on the stream ([`Connection::next_chunk`]
    /// reads a chunked one piece by piece).
    pub fn read_head(&mut self, head_only: bool) -> io::Result<Head> {
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            self.fill()?;
        };
        let text = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end + 4);
        Head::parse(text, head_only)
    }

    /// The data of the next chunk of a chunked body, `None` after the last one.
    pub fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            match chunk(&self.buf)? {
                Chunk::Data(data, used) => {
                    let piece = self.buf[data].to_vec();
                    self.buf.drain(..used);
                    return Ok(Some(piece));
                }
                Chunk::Last(used) => {
                    self.buf.drain(..used);
                    return Ok(None);
                }
                Chunk::Incomplete => self.fill()?,
            }
        }
    }

    /// Whether the server has closed the stream, with nothing left unread.
    pub fn closed_by_server(&mut self) -> io::Result<bool> {
        if !self.buf.is_empty() {
            return Ok(false);
        }
        let mut byte = [0u8; 1];
        let n = self.stream.read(&mut byte)?;
        self.buf.extend_from_slice(&byte[..n]);
        Ok(n == 0)
    }

    /// Reads more bytes; the end of the stream before a whole answer is an error.
    fn fill(&mut self) -> io::Result<()> {
        match self.stream.read(&mut self.scratch)? {
            0 => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                if self.buf.is_empty() {
                    "the server closed the connection without answering".to_string()
                } else {
                    format!(
                        "the server closed the connection in the middle of an answer: {:?}",
                        String::from_utf8_lossy(&self.buf[..self.buf.len().min(200)])
                    )
                },
            )),
            n => {
                self.buf.extend_from_slice(&self.scratch[..n]);
                Ok(())
            }
        }
    }
}

/// One connection to a target, opened when needed: requests on it are kept alive,
/// and a kept-alive connection the server has closed meanwhile is opened again once.
pub struct Client {
    target: Target,
    timeout: Option<Duration>,
    conn: Option<Connection<Stream>>,
}

impl Client {
    pub fn new(target: Target) -> Client {
        Client {
            target,
            timeout: None,
            conn: None,
        }
    }

    /// Read and write timeout of every connection (default: none).
    pub fn timeout(mut self, timeout: Duration) -> Client {
        self.timeout = Some(timeout);
        self
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Sends `request` and reads its answer.
    pub fn request(&mut self, request: &Rendered) -> io::Result<Response> {
        let reused = self.conn.is_some();
        match self.once(request) {
            // The server may close a kept-alive connection while it idles.
            Err(_) if reused => self.once(request),
            other => other,
        }
    }

    fn once(&mut self, request: &Rendered) -> io::Result<Response> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                let stream = self.target.connect()?;
                stream.set_timeouts(self.timeout)?;
                self.conn.insert(Connection::new(stream))
            }
        };
        let result = conn.exchange(request);
        if !matches!(&result, Ok(r) if !r.closes()) {
            self.conn = None;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    /// A stream that reads `input` a few bytes at a time and records what is written.
    struct Trickle {
        input: Cursor<Vec<u8>>,
        step: usize,
        written: Vec<u8>,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.step);
            self.input.read(&mut buf[..n])
        }
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn conn(input: &[u8], step: usize) -> Connection<Trickle> {
        Connection::new(Trickle {
            input: Cursor::new(input.to_vec()),
            step,
            written: Vec::new(),
        })
    }

    #[test]
    fn pipelined_answers_are_read_in_order_whatever_the_read_sizes() {
        let input = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nnot\r\n6\r\n found\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\nuntil the end";
        for step in [1, 3, 7, 4096] {
            let mut c = conn(input, step);
            let r = c.read_response(false).unwrap();
            assert_eq!((r.status, r.text().as_ref()), (200, "ok"));
            assert!(!r.closes());
            let r = c.read_response(false).unwrap();
            assert_eq!((r.status, r.text().as_ref()), (404, "not found"));
            assert_eq!(r.header("transfer-encoding"), Some("chunked"));
            let r = c.read_response(false).unwrap();
            assert_eq!((r.text().as_ref(), r.closes()), ("until the end", true));
            assert!(c.closed_by_server().unwrap());
        }
    }

    #[test]
    fn a_close_before_the_answer_ends_is_an_error() {
        let mut c = conn(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 64);
        let e = c.read_response(false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let mut c = conn(b"", 64);
        assert!(
            c.read_response(false)
                .unwrap_err()
                .to_string()
                .contains("without answering")
        );
    }

    #[test]
    fn an_event_stream_comes_chunk_by_chunk() {
        let mut c = conn(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ndata:\r\n2\r\n\n\n\r\n0\r\n\r\n",
            2,
        );
        let head = c.read_head(false).unwrap();
        assert_eq!(head.status, 200);
        assert_eq!(c.next_chunk().unwrap().as_deref(), Some(&b"data:"[..]));
        assert_eq!(c.next_chunk().unwrap().as_deref(), Some(&b"\n\n"[..]));
        assert_eq!(c.next_chunk().unwrap(), None);
    }

    #[test]
    fn a_kept_alive_connection_the_server_closed_is_opened_again_once() {
        let dir = std::env::temp_dir().join(format!("lavender-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        // Answers one request per connection, then closes it without saying so.
        let server = std::thread::spawn(move || {
            for n in 0..2 {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = [0u8; 1024];
                let mut got = Vec::new();
                while find(&got, b"\r\n\r\n").is_none() {
                    let k = s.read(&mut buf).unwrap();
                    got.extend_from_slice(&buf[..k]);
                }
                write!(s, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{n}").unwrap();
            }
        });
        let mut client = Client::new(Target::Unix(socket)).timeout(Duration::from_secs(10));
        let request = crate::Request::get("/status").render();
        assert_eq!(client.request(&request).unwrap().text(), "0");
        assert_eq!(client.request(&request).unwrap().text(), "1");
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
