//! The tests' requests over TCP (the daemon's port, Chromium's DevTools endpoint)
//! or the daemon's Unix socket, through the workspace's one HTTP/1.1 client
//! (`lavender-client`), answered with the status, the head and the body.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use lavender_client::{Connection, Rendered, Request, Response, Stream, Target};
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

impl From<Response> for Http {
    fn from(r: Response) -> Http {
        Http {
            status: r.status,
            head: r.head.text.to_ascii_lowercase(),
            body: r.text().into_owned(),
        }
    }
}

/// The request the tests send: `Host` named, the token if any, a JSON body if any.
pub fn request(
    host: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> Request {
    let mut r = Request::new(method, path).host(host);
    if let Some(token) = token {
        r = r.bearer(token);
    }
    if let Some(body) = body {
        r = r.json(body);
    }
    r
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
    let request = request(host, method, path, body, token).close().render();
    once(&Target::Tcp(addr.into()), &request)
        .unwrap_or_else(|e| panic!("no HTTP answer to {method} {path} from {addr}: {e}"))
}

/// One request over the Unix socket; `None` when nothing answers there.
pub fn uds(socket: &Path, method: &str, path: &str, body: Option<&str>) -> Option<Http> {
    let request = request("localhost", method, path, body, None)
        .close()
        .render();
    once(&Target::Unix(socket.into()), &request).ok()
}

fn once(target: &Target, request: &Rendered) -> std::io::Result<Http> {
    let stream = target.connect()?;
    stream.set_timeouts(Some(READ_TIMEOUT))?;
    // Read to the end of the body, not of the connection: some servers (Chromium's)
    // keep it open whatever the request asked.
    Ok(Connection::new(stream).exchange(request)?.into())
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

/// One connection kept open across requests, as a polling client keeps it; bytes
/// may also be written by hand (several requests at once, or half of one).
pub struct KeepAlive<S> {
    conn: Connection<S>,
    host: String,
}

impl KeepAlive<Stream> {
    pub fn tcp(addr: &str) -> KeepAlive<Stream> {
        KeepAlive::over(Target::Tcp(addr.into()), addr)
    }

    pub fn uds(socket: &Path) -> KeepAlive<Stream> {
        KeepAlive::over(Target::Unix(socket.into()), "localhost")
    }

    fn over(target: Target, host: &str) -> KeepAlive<Stream> {
        let stream = target
            .connect()
            .unwrap_or_else(|e| panic!("connect to {}: {e}", target.describe()));
        stream.set_timeouts(Some(READ_TIMEOUT)).unwrap();
        KeepAlive {
            conn: Connection::new(stream),
            host: host.to_string(),
        }
    }
}

impl<S: Read + Write> KeepAlive<S> {
    /// The text of a request on this connection (to send several at once, `write`).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        token: Option<&str>,
    ) -> String {
        let rendered = request(&self.host, method, path, body, token).render();
        String::from_utf8(rendered.bytes().to_vec()).expect("a request is text")
    }

    /// Sends `bytes` as they are (one or several requests, or part of one).
    pub fn write(&mut self, bytes: &[u8]) {
        self.conn
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
        self.conn
            .read_response(false)
            .unwrap_or_else(|e| panic!("read an answer: {e}"))
            .into()
    }

    /// Whether the server has closed the connection (after the answers read so far).
    pub fn closed_by_server(&mut self) -> bool {
        matches!(self.conn.closed_by_server(), Ok(true))
    }
}
