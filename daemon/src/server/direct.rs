//! `GET /status` answered outside the async runtime. Each accepted connection goes
//! first to a thread of its own, which reads with blocking calls and answers
//! `GET /status` from the latest snapshot: one `read` and one `write` per request,
//! and no runtime worker woken. The first request that is anything else (another
//! route or method, a query, a body, an upgrade, HTTP/1.0, an odd or oversized
//! head) goes back to axum together with the bytes read so far, and axum serves the
//! connection from then on as it serves one it accepted itself. So do a connection
//! idle for [`IDLE`] and every connection beyond [`MAX_THREADS`].
//!
//! Why a second path: polled 1,000 times a second on an otherwise idle machine,
//! hyper on tokio spends about 50 µs of CPU per request, nearly all of it code that
//! runs cold after a millisecond of sleep; a blocking thread spends about 12 µs.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use chrono::{DateTime, Utc};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use crate::status::StatusCache;

/// A connection silent this long goes to axum (a thread is not pinned for ever by a
/// client that keeps its connection open, or sends half a request).
pub const IDLE: Duration = Duration::from_secs(30);
/// Connections on threads of their own at once, per listener; more go to axum (a
/// flood of connections cannot become a flood of threads).
pub const MAX_THREADS: usize = 64;
/// A request head longer than this is not a status request.
const MAX_HEAD: usize = 8 * 1024;
/// Each thread runs little more than a read, a copy and a write.
const STACK: usize = 256 * 1024;

/// A stream that can leave the runtime for a blocking thread and come back.
pub trait Blocking: Sized + Send + 'static {
    type Std: Read + Write + Send + 'static;
    fn into_blocking(self) -> io::Result<Self::Std>;
    /// Needs the runtime's context (`Handle::enter`): the stream registers with its reactor.
    fn from_blocking(std: Self::Std) -> io::Result<Self>;
    fn set_read_timeout(std: &Self::Std, timeout: Option<Duration>) -> io::Result<()>;
}

impl Blocking for tokio::net::TcpStream {
    type Std = std::net::TcpStream;
    fn into_blocking(self) -> io::Result<Self::Std> {
        let std = self.into_std()?;
        std.set_nonblocking(false)?;
        // One write per answer; never wait for an acknowledgement to send it.
        std.set_nodelay(true)?;
        Ok(std)
    }
    fn from_blocking(std: Self::Std) -> io::Result<Self> {
        std.set_nonblocking(true)?;
        tokio::net::TcpStream::from_std(std)
    }
    fn set_read_timeout(std: &Self::Std, timeout: Option<Duration>) -> io::Result<()> {
        std.set_read_timeout(timeout)
    }
}

impl Blocking for tokio::net::UnixStream {
    type Std = std::os::unix::net::UnixStream;
    fn into_blocking(self) -> io::Result<Self::Std> {
        let std = self.into_std()?;
        std.set_nonblocking(false)?;
        Ok(std)
    }
    fn from_blocking(std: Self::Std) -> io::Result<Self> {
        std.set_nonblocking(true)?;
        tokio::net::UnixStream::from_std(std)
    }
    fn set_read_timeout(std: &Self::Std, timeout: Option<Duration>) -> io::Result<()> {
        std.set_read_timeout(timeout)
    }
}

/// A stream whose first reads return `prefix`: the bytes a status thread had read
/// before it handed the connection to axum.
pub struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    fn new(inner: S, prefix: Vec<u8>) -> Prefixed<S> {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

type Handed<L> = (Prefixed<<L as Listener>::Io>, <L as Listener>::Addr);

/// Wraps axum's listener: hands each connection to a status thread, and yields to
/// axum the connections those threads give back.
pub struct DirectListener<L: Listener> {
    inner: L,
    cache: StatusCache,
    back_tx: mpsc::UnboundedSender<Handed<L>>,
    back_rx: mpsc::UnboundedReceiver<Handed<L>>,
    threads: Arc<AtomicUsize>,
    /// Set when axum stops accepting (graceful shutdown): threads close their
    /// connection after the answer in hand instead of waiting for another request.
    closing: Arc<AtomicBool>,
}

impl<L: Listener> DirectListener<L> {
    pub fn new(inner: L, cache: StatusCache) -> DirectListener<L> {
        let (back_tx, back_rx) = mpsc::unbounded_channel();
        DirectListener {
            inner,
            cache,
            back_tx,
            back_rx,
            threads: Arc::new(AtomicUsize::new(0)),
            closing: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl<L: Listener> Drop for DirectListener<L> {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Relaxed);
    }
}

impl<L> Listener for DirectListener<L>
where
    L: Listener,
    L::Io: Blocking,
    L::Addr: Sync,
{
    type Io = Prefixed<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                // Both branches are cancel-safe: a lost race loses no connection.
                Some(back) = self.back_rx.recv() => return back,
                (io, addr) = self.inner.accept() => {
                    if let Some(to_axum) = self.to_thread(io, addr) {
                        return to_axum;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl<L> DirectListener<L>
where
    L: Listener,
    L::Io: Blocking,
    L::Addr: Sync,
{
    /// Starts a status thread for the connection; gives it back when none may start.
    fn to_thread(&self, io: L::Io, addr: L::Addr) -> Option<Handed<L>> {
        if self.threads.load(Ordering::Relaxed) >= MAX_THREADS {
            return Some((Prefixed::new(io, Vec::new()), addr));
        }
        let conn = match io.into_blocking() {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!("a status connection was dropped: {e}");
                return None;
            }
        };
        let thread = StatusThread::<L> {
            cache: self.cache.clone(),
            back: self.back_tx.clone(),
            runtime: tokio::runtime::Handle::current(),
            closing: self.closing.clone(),
            count: ThreadCount::new(&self.threads),
        };
        let spawned = std::thread::Builder::new()
            .name("status".into())
            .stack_size(STACK)
            .spawn(move || thread.serve(conn, addr));
        if let Err(e) = spawned {
            tracing::warn!("a status connection was dropped: cannot start its thread: {e}");
        }
        None
    }
}

/// Counts a live status thread from its creation to its end, panics included.
struct ThreadCount(Arc<AtomicUsize>);

impl ThreadCount {
    fn new(count: &Arc<AtomicUsize>) -> ThreadCount {
        count.fetch_add(1, Ordering::Relaxed);
        ThreadCount(count.clone())
    }
}

impl Drop for ThreadCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

struct StatusThread<L: Listener> {
    cache: StatusCache,
    back: mpsc::UnboundedSender<Handed<L>>,
    runtime: tokio::runtime::Handle,
    closing: Arc<AtomicBool>,
    count: ThreadCount,
}

impl<L> StatusThread<L>
where
    L: Listener,
    L::Io: Blocking,
{
    fn serve(self, mut conn: <L::Io as Blocking>::Std, addr: L::Addr) {
        if L::Io::set_read_timeout(&conn, Some(IDLE)).is_err() {
            return self.hand_back(conn, addr, Vec::new());
        }
        let mut buf = vec![0u8; MAX_HEAD];
        let mut have = 0;
        let mut answer = Answer::default();
        loop {
            // Every complete status request in the buffer gets its answer, in order.
            loop {
                match classify(&buf[..have]) {
                    Head::Status { len, close } => {
                        answer.render(&self.cache, lavender::time::now_utc(), close);
                        if conn.write_all(&answer.bytes).is_err() {
                            return;
                        }
                        buf.copy_within(len..have, 0);
                        have -= len;
                        if close || self.closing.load(Ordering::Relaxed) {
                            return;
                        }
                    }
                    Head::Incomplete if have < buf.len() => break,
                    Head::Incomplete | Head::Other => {
                        buf.truncate(have);
                        return self.hand_back(conn, addr, buf);
                    }
                }
            }
            match conn.read(&mut buf[have..]) {
                Ok(0) => return,
                Ok(n) => have += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    buf.truncate(have);
                    return self.hand_back(conn, addr, buf);
                }
                Err(_) => return,
            }
        }
    }

    /// Gives the connection to axum, which reads `prefix` first. Dropped if axum has
    /// stopped accepting (the daemon is shutting down).
    fn hand_back(self, conn: <L::Io as Blocking>::Std, addr: L::Addr, prefix: Vec<u8>) {
        let _ = L::Io::set_read_timeout(&conn, None);
        let _runtime = self.runtime.enter();
        match L::Io::from_blocking(conn) {
            Ok(io) => {
                // The count drops before axum may accept, so a full house of threads
                // never sends the next connection to axum for this one's sake.
                drop(self.count);
                let _ = self.back.send((Prefixed::new(io, prefix), addr));
            }
            Err(e) => tracing::warn!("a connection was dropped on its way to the router: {e}"),
        }
    }
}

/// What the head of the buffer holds.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// A complete `GET /status` request of `len` bytes; `close`: the client asked to
    /// close the connection after the answer.
    Status { len: usize, close: bool },
    /// The start of what may still become a status request.
    Incomplete,
    /// Anything else: the router's business.
    Other,
}

const REQUEST_LINE: &[u8] = b"GET /status HTTP/1.1\r\n";

/// Classifies the request at the start of `buf`. Strict on purpose: whatever is not
/// plainly a body-less `GET /status` goes to the router, which knows HTTP.
fn classify(buf: &[u8]) -> Head {
    let line = buf.len().min(REQUEST_LINE.len());
    if buf[..line] != REQUEST_LINE[..line] {
        return Head::Other;
    }
    if buf.len() <= REQUEST_LINE.len() {
        return Head::Incomplete;
    }
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return Head::Incomplete;
    };
    let mut close = false;
    let headers = &buf[REQUEST_LINE.len()..end + 2];
    for header in headers.split(|&b| b == b'\n') {
        let Some(header) = header.strip_suffix(b"\r") else {
            if header.is_empty() {
                continue;
            }
            return Head::Other; // a bare LF
        };
        let Some(colon) = header.iter().position(|&b| b == b':') else {
            return Head::Other;
        };
        let (name, value) = (&header[..colon], header[colon + 1..].trim_ascii());
        if name.is_empty() || name.iter().any(|b| b.is_ascii_whitespace()) {
            return Head::Other; // folded or malformed
        }
        if name.eq_ignore_ascii_case(b"connection") {
            let mut options = value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
            if options.any(|o| o.eq_ignore_ascii_case(b"close")) {
                close = true;
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            if value != b"0" {
                return Head::Other;
            }
        } else if ["transfer-encoding", "expect", "upgrade"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
        {
            return Head::Other;
        }
    }
    Head::Status {
        len: end + 4,
        close,
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The response, rendered into buffers a thread reuses for every request.
#[derive(Default)]
struct Answer {
    body: String,
    bytes: Vec<u8>,
    /// The `date` header's value and the second it is for.
    date: (i64, String),
}

impl Answer {
    fn render(&mut self, cache: &StatusCache, now: DateTime<Utc>, close: bool) {
        self.body.clear();
        cache.push_status_body(now, &mut self.body);
        if self.date.0 != now.timestamp() || self.date.1.is_empty() {
            self.date = (
                now.timestamp(),
                now.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
            );
        }
        self.bytes.clear();
        let connection = if close { "connection: close\r\n" } else { "" };
        let _ = write!(
            self.bytes,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{connection}date: {}\r\n\r\n",
            self.body.len(),
            self.date.1
        );
        self.bytes.extend_from_slice(self.body.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_status_request_is_answered_here() {
        let req = b"GET /status HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
        assert_eq!(
            classify(req),
            Head::Status {
                len: req.len(),
                close: false
            }
        );
        let two = [&req[..], &req[..]].concat();
        assert_eq!(
            classify(&two),
            Head::Status {
                len: req.len(),
                close: false
            }
        );
        let close = b"GET /status HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n";
        assert_eq!(
            classify(close),
            Head::Status {
                len: close.len(),
                close: true
            }
        );
        let empty_body = b"GET /status HTTP/1.1\r\ncontent-length: 0\r\n\r\n";
        assert!(matches!(classify(empty_body), Head::Status { .. }));
    }

    #[test]
    fn a_partial_status_request_waits_for_the_rest() {
        let req = b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n";
        for cut in 0..req.len() {
            assert_eq!(classify(&req[..cut]), Head::Incomplete, "cut at {cut}");
        }
    }

    #[test]
    fn everything_else_goes_to_the_router_as_soon_as_it_shows() {
        for req in [
            &b"POST /pipeline/stop HTTP/1.1\r\n"[..],
            b"GET /statusx HTTP/1.1\r\n\r\n",
            b"GET /status?x=1 HTTP/1.1\r\n\r\n",
            b"GET /status HTTP/1.0\r\n\r\n",
            b"HEAD /status HTTP/1.1\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\n\r\n",
            b"G",
            b"get /status HTTP/1.1\r\n\r\n",
            b"GET /status HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            b"GET /status HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"GET /status HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
            b"GET /status HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"GET /status HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
            b"GET /status HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET /status HTTP/1.1\r\nHost: x\n\r\n\r\n",
        ] {
            // `G` alone is a prefix of the request line; it must wait, not go.
            let expect = if req == b"G" {
                Head::Incomplete
            } else {
                Head::Other
            };
            assert_eq!(classify(req), expect, "{:?}", String::from_utf8_lossy(req));
        }
    }

    #[tokio::test]
    async fn a_prefixed_stream_reads_its_prefix_then_the_stream() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b" world").await.unwrap();
        drop(a);
        let mut s = Prefixed::new(b, b"hello".to_vec());
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
