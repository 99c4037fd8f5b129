//! A minimal blocking HTTP/1.1 client over TCP or a Unix socket: keep-alive,
//! `Content-Length` and chunked bodies, one reconnect when a kept-alive
//! connection was closed by the server.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub enum Target {
    Tcp(String),
    Unix(PathBuf),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::Tcp(a) => format!("tcp {a}"),
            Target::Unix(p) => format!("unix {}", p.display()),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Target::Tcp(_) => "tcp",
            Target::Unix(_) => "unix",
        }
    }
}

/// A request rendered once and sent many times.
pub fn render(method: &str, path: &str, headers: &[String], body: &str) -> Vec<u8> {
    let mut s = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    for h in headers {
        s.push_str(h);
        s.push_str("\r\n");
    }
    if !body.is_empty() || method != "GET" {
        s.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    s.push_str("\r\n");
    s.push_str(body);
    s.into_bytes()
}

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    close: bool,
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

struct Conn {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Conn {
    fn connect(target: &Target) -> io::Result<Conn> {
        let stream: Box<dyn Stream> = match target {
            Target::Tcp(addr) => {
                let s = TcpStream::connect(addr)?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
            Target::Unix(path) => Box::new(UnixStream::connect(path)?),
        };
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    /// Reads more bytes into the buffer; EOF is an error (the response is incomplete).
    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    fn roundtrip(&mut self, req: &[u8]) -> io::Result<Response> {
        self.stream.write_all(req)?;
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            self.fill()?;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("no status line in {head:?}")))?;
        let (mut length, mut chunked, mut close) = (None, false, false);
        for line in lines {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
            match k.as_str() {
                "content-length" => length = v.parse::<usize>().ok(),
                "transfer-encoding" => chunked = v.contains("chunked"),
                "connection" => close = v == "close",
                _ => {}
            }
        }
        self.buf.drain(..head_end + 4);
        let body = if chunked {
            self.read_chunked()?
        } else if let Some(n) = length {
            while self.buf.len() < n {
                self.fill()?;
            }
            self.buf.drain(..n).collect()
        } else {
            // No length: the body runs to the end of the connection.
            let mut rest = std::mem::take(&mut self.buf);
            self.stream.read_to_end(&mut rest)?;
            close = true;
            rest
        };
        Ok(Response {
            status,
            body,
            close,
        })
    }

    fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = find(&self.buf, b"\r\n") {
                    break i;
                }
                self.fill()?;
            };
            let size_text = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad(format!("bad chunk size {size_text:?}")))?;
            self.buf.drain(..line_end + 2);
            while self.buf.len() < size + 2 {
                self.fill()?;
            }
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
            if size == 0 {
                return Ok(body);
            }
        }
    }
}

/// A connection that is (re)opened as needed.
pub struct Client {
    target: Target,
    conn: Option<Conn>,
}

impl Client {
    pub fn new(target: Target) -> Client {
        Client { target, conn: None }
    }

    pub fn request(&mut self, req: &[u8]) -> io::Result<Response> {
        let reused = self.conn.is_some();
        match self.once(req) {
            Err(e) if reused => {
                // The server may close an idle kept-alive connection: one fresh try.
                let _ = e;
                self.conn = None;
                self.once(req)
            }
            other => other,
        }
    }

    fn once(&mut self, req: &[u8]) -> io::Result<Response> {
        if self.conn.is_none() {
            self.conn = Some(Conn::connect(&self.target)?);
        }
        let conn = self.conn.as_mut().expect("connected above");
        match conn.roundtrip(req) {
            Ok(r) => {
                if r.close {
                    self.conn = None;
                }
                Ok(r)
            }
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }

    /// `GET path` parsed as JSON.
    pub fn get_json(&mut self, path: &str) -> io::Result<serde_json::Value> {
        let r = self.request(&render("GET", path, &[], ""))?;
        if r.status != 200 {
            return Err(bad(format!("GET {path}: HTTP {}", r.status)));
        }
        serde_json::from_slice(&r.body).map_err(|e| bad(format!("GET {path}: not JSON: {e}")))
    }
}
