//! `GET /status` answered outside the async runtime. Each accepted connection goes
//! first to the listener's status thread, which waits on all of its connections at
//! once (epoll, kqueue; through mio) and answers `GET /status` from the latest
//! snapshot: a read and a write per request, and no runtime worker woken. The first
//! request that is anything else (another route or method, a query, a body, an
//! upgrade, HTTP/1.0, an odd or oversized head) goes back to axum together with the
//! bytes read so far, and axum serves the connection from then on as it serves one
//! it accepted itself. So does a connection idle for [`IDLE`], and every connection
//! beyond [`MAX_CONNECTIONS`].
//!
//! Why a second path: polled 1,000 times a second on an otherwise idle machine,
//! hyper on tokio spends about 50 µs of CPU per request, nearly all of it code that
//! runs cold after a millisecond of sleep; a bare loop over the sockets spends a
//! fraction of that. One thread for all connections, not one each: under a flood
//! of requests it answers every ready connection per wake-up instead of switching
//! threads per request.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::serve::Listener;
use chrono::{DateTime, Utc};
use mio::{Interest, Token};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use crate::status::StatusCache;

/// A connection silent this long goes to axum (the status thread does not keep a
/// client's half-sent request for ever).
pub const IDLE: Duration = Duration::from_secs(30);
/// Connections on the status thread at once, per listener (each holds an 8 KiB
/// buffer); more go to axum.
pub const MAX_CONNECTIONS: usize = 256;
/// Answers owed to a peer that reads slower than it asks, at most (about): no more
/// requests are read from it until they are written.
const OWED_LIMIT: usize = 64 * 1024;
/// A request head longer than this is not a status request.
const MAX_HEAD: usize = 8 * 1024;
/// The status thread's wake-up for new connections and for closing.
const WAKER: Token = Token(usize::MAX);

/// A stream that can leave the runtime for the status thread and come back.
pub trait Lane: Sized + Send + 'static {
    type Mio: mio::event::Source + Read + Write + Send + 'static;
    fn into_mio(self) -> io::Result<Self::Mio>;
    /// Needs the runtime's context (`Handle::enter`): the stream registers with its reactor.
    fn from_mio(stream: Self::Mio) -> io::Result<Self>;
}

impl Lane for tokio::net::TcpStream {
    type Mio = mio::net::TcpStream;
    fn into_mio(self) -> io::Result<Self::Mio> {
        let std = self.into_std()?;
        // One write per answer; never wait for an acknowledgement to send it.
        std.set_nodelay(true)?;
        Ok(mio::net::TcpStream::from_std(std))
    }
    fn from_mio(stream: Self::Mio) -> io::Result<Self> {
        tokio::net::TcpStream::from_std(stream.into())
    }
}

impl Lane for tokio::net::UnixStream {
    type Mio = mio::net::UnixStream;
    fn into_mio(self) -> io::Result<Self::Mio> {
        Ok(mio::net::UnixStream::from_std(self.into_std()?))
    }
    fn from_mio(stream: Self::Mio) -> io::Result<Self> {
        tokio::net::UnixStream::from_std(stream.into())
    }
}

/// A stream whose first reads return `prefix` (the bytes the status thread had read
/// before it handed the connection to axum) and whose first writes are `owed`.
pub struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    /// Answers of the status thread the peer had not taken yet: written before
    /// anything the router writes.
    owed: Vec<u8>,
    inner: S,
}

impl<S> Prefixed<S> {
    fn new(inner: S, prefix: Vec<u8>, owed: Vec<u8>) -> Prefixed<S> {
        Prefixed {
            prefix,
            at: 0,
            owed,
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

impl<S: AsyncWrite + Unpin> Prefixed<S> {
    /// Writes what is owed; ready once none is left.
    fn poll_owed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.owed.is_empty() {
            match std::pin::Pin::new(&mut self.inner).poll_write(cx, &self.owed) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.owed.drain(..n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_owed(cx))?;
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_owed(cx))?;
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_owed(cx))?;
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_owed(cx))?;
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

type Handed<L> = (Prefixed<<L as Listener>::Io>, <L as Listener>::Addr);

/// What the listener sends the status thread.
enum ToThread<S, A> {
    Connection(S, A),
    /// axum has stopped accepting: close every connection and end.
    Close,
}

/// The listener's end of its status thread.
struct ThreadHandle<S, A> {
    tx: std_mpsc::Sender<ToThread<S, A>>,
    waker: Arc<mio::Waker>,
    /// Connections the thread holds (it counts down; the listener counts up).
    held: Arc<AtomicUsize>,
}

impl<S, A> ThreadHandle<S, A> {
    fn send(&self, msg: ToThread<S, A>) -> bool {
        self.tx.send(msg).is_ok() && self.waker.wake().is_ok()
    }
}

/// Wraps axum's listener: hands each connection to the status thread, and yields to
/// axum the connections that thread gives back.
pub struct DirectListener<L: Listener>
where
    L::Io: Lane,
{
    inner: L,
    back_rx: mpsc::UnboundedReceiver<Handed<L>>,
    /// `None` if the thread could not start: axum then serves every connection.
    thread: Option<ThreadHandle<<L::Io as Lane>::Mio, L::Addr>>,
}

impl<L> DirectListener<L>
where
    L: Listener,
    L::Io: Lane,
{
    /// Starts the status thread (needs the runtime's context, to hand connections
    /// back); a connection silent for `idle` goes to the router ([`IDLE`]).
    pub fn new(inner: L, cache: StatusCache, idle: Duration) -> DirectListener<L> {
        let (back_tx, back_rx) = mpsc::unbounded_channel();
        let thread = StatusThread::<L>::start(cache, back_tx, idle)
            .inspect_err(|e| {
                tracing::warn!("no status thread ({e}): the router answers every request")
            })
            .ok();
        DirectListener {
            inner,
            back_rx,
            thread,
        }
    }
}

impl<L: Listener> Drop for DirectListener<L>
where
    L::Io: Lane,
{
    fn drop(&mut self) {
        if let Some(t) = &self.thread {
            t.send(ToThread::Close);
        }
    }
}

impl<L> Listener for DirectListener<L>
where
    L: Listener,
    L::Io: Lane,
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
    L::Io: Lane,
{
    /// Gives the connection to the status thread; gives it back when that cannot take it.
    fn to_thread(&self, io: L::Io, addr: L::Addr) -> Option<Handed<L>> {
        let Some(thread) = &self.thread else {
            return Some((Prefixed::new(io, Vec::new(), Vec::new()), addr));
        };
        // Only this task adds to the count, so the check and the add cannot race.
        if thread.held.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            return Some((Prefixed::new(io, Vec::new(), Vec::new()), addr));
        }
        thread.held.fetch_add(1, Ordering::Relaxed);
        match io.into_mio() {
            Ok(stream) => {
                if !thread.send(ToThread::Connection(stream, addr)) {
                    tracing::warn!("a status connection was dropped: the status thread has ended");
                }
            }
            Err(e) => tracing::warn!("a status connection was dropped: {e}"),
        }
        None
    }
}

/// One connection on the status thread.
struct Conn<S, A> {
    stream: S,
    addr: A,
    buf: Vec<u8>,
    have: usize,
    /// Answers not yet written (the peer reads slower than it asks).
    out: Vec<u8>,
    /// What the connection is registered for.
    interest: Interest,
    /// Closes once `out` is written (the peer asked to, or stopped sending).
    closing: bool,
    last_active: Instant,
}

/// What became of a connection after its turn.
enum Turn {
    Keep,
    Close,
    ToRouter,
}

struct StatusThread<L: Listener>
where
    L::Io: Lane,
{
    cache: StatusCache,
    back: mpsc::UnboundedSender<Handed<L>>,
    runtime: tokio::runtime::Handle,
    rx: std_mpsc::Receiver<ToThread<<L::Io as Lane>::Mio, L::Addr>>,
    held: Arc<AtomicUsize>,
    idle: Duration,
    poll: mio::Poll,
    conns: HashMap<Token, Conn<<L::Io as Lane>::Mio, L::Addr>>,
    next_token: usize,
    answer: Answer,
}

impl<L> StatusThread<L>
where
    L: Listener,
    L::Io: Lane,
{
    fn start(
        cache: StatusCache,
        back: mpsc::UnboundedSender<Handed<L>>,
        idle: Duration,
    ) -> io::Result<ThreadHandle<<L::Io as Lane>::Mio, L::Addr>> {
        let poll = mio::Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER)?);
        let (tx, rx) = std_mpsc::channel();
        let held = Arc::new(AtomicUsize::new(0));
        let thread = StatusThread::<L> {
            cache,
            back,
            runtime: tokio::runtime::Handle::current(),
            rx,
            held: held.clone(),
            idle,
            poll,
            conns: HashMap::new(),
            next_token: 0,
            answer: Answer::default(),
        };
        std::thread::Builder::new()
            .name("status".into())
            .spawn(move || thread.run())?;
        Ok(ThreadHandle { tx, waker, held })
    }

    fn run(mut self) {
        let mut events = mio::Events::with_capacity(256);
        let mut timeout = None;
        loop {
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!("the status thread stops: {e}; the router answers from now on");
                return self.hand_all_back();
            }
            // One clock reading per wake-up serves every connection it turns.
            let now = Instant::now();
            for event in events.iter() {
                let token = event.token();
                if token == WAKER {
                    if !self.take_new(now) {
                        return;
                    }
                } else {
                    self.turn(token, now);
                }
            }
            timeout = self.expire_idle(now);
        }
    }

    /// Lets go of the connections silent for `idle` (to the router, or closed if
    /// they were closing); returns how long until the next one falls silent.
    fn expire_idle(&mut self, now: Instant) -> Option<Duration> {
        let mut idle = Vec::new();
        let mut next: Option<Instant> = None;
        for (token, c) in &self.conns {
            let at = c.last_active + self.idle;
            if now >= at {
                idle.push((
                    *token,
                    if c.closing {
                        Turn::Close
                    } else {
                        Turn::ToRouter
                    },
                ));
            } else {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        for (token, how) in idle {
            self.finish(token, how);
        }
        next.map(|t| t - now)
    }

    /// Registers the connections sent since the last wake-up; false once told to close.
    fn take_new(&mut self, now: Instant) -> bool {
        while let Ok(msg) = self.rx.try_recv() {
            let (mut stream, addr) = match msg {
                ToThread::Connection(stream, addr) => (stream, addr),
                ToThread::Close => return false,
            };
            let token = Token(self.next_token);
            self.next_token = (self.next_token + 1) % WAKER.0;
            if let Err(e) = self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE)
            {
                tracing::warn!("a status connection goes to the router: {e}");
                self.release();
                self.hand_back(stream, addr, Vec::new(), Vec::new());
                continue;
            }
            let conn = Conn {
                stream,
                addr,
                buf: vec![0; MAX_HEAD],
                have: 0,
                out: Vec::new(),
                interest: Interest::READABLE,
                closing: false,
                last_active: now,
            };
            self.conns.insert(token, conn);
            // Its request may have come before the registration.
            self.turn(token, now);
        }
        true
    }

    /// Reads what the connection sent, answers every complete status request in it,
    /// and writes what it can.
    fn turn(&mut self, token: Token, now: Instant) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        conn.last_active = now;
        let turn = serve(conn, &self.cache, &mut self.answer);
        match turn {
            Turn::Keep => {
                let interest = if conn.out.is_empty() {
                    Interest::READABLE
                } else {
                    Interest::READABLE | Interest::WRITABLE
                };
                // Changed only when answers start or stop waiting for room.
                if interest != conn.interest {
                    conn.interest = interest;
                    if self
                        .poll
                        .registry()
                        .reregister(&mut conn.stream, token, interest)
                        .is_err()
                    {
                        self.finish(token, Turn::Close);
                    }
                }
            }
            other => self.finish(token, other),
        }
    }

    fn finish(&mut self, token: Token, how: Turn) {
        let Some(mut conn) = self.conns.remove(&token) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.release();
        if let Turn::ToRouter = how {
            conn.buf.truncate(conn.have);
            self.hand_back(conn.stream, conn.addr, conn.buf, conn.out);
        }
    }

    fn hand_all_back(&mut self) {
        let tokens: Vec<Token> = self.conns.keys().copied().collect();
        for token in tokens {
            self.finish(token, Turn::ToRouter);
        }
    }

    fn release(&self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }

    /// Gives the connection to axum, which reads `prefix` first and writes `owed`
    /// (answers the peer has not taken yet) before its own. Dropped if axum has
    /// stopped accepting (the daemon is shutting down).
    fn hand_back(
        &self,
        stream: <L::Io as Lane>::Mio,
        addr: L::Addr,
        prefix: Vec<u8>,
        owed: Vec<u8>,
    ) {
        let _runtime = self.runtime.enter();
        match L::Io::from_mio(stream) {
            Ok(io) => {
                let _ = self.back.send((Prefixed::new(io, prefix, owed), addr));
            }
            Err(e) => tracing::warn!("a connection was dropped on its way to the router: {e}"),
        }
    }
}

/// One turn of a connection: flush, read until the socket is drained, answer.
fn serve<S: Read + Write, A>(
    conn: &mut Conn<S, A>,
    cache: &StatusCache,
    answer: &mut Answer,
) -> Turn {
    if flush(conn).is_err() {
        return Turn::Close;
    }
    let mut drained = false;
    loop {
        if conn.closing {
            return if conn.out.is_empty() {
                Turn::Close
            } else {
                Turn::Keep
            };
        }
        // Every complete status request in the buffer gets its answer, in order,
        // while the answers owed stay few.
        let mut owed_enough = false;
        loop {
            if conn.out.len() >= OWED_LIMIT {
                owed_enough = true;
                break;
            }
            match classify(&conn.buf[..conn.have]) {
                Head::Status { len, close } => {
                    answer.render(cache, lavender::time::now_utc(), close);
                    conn.out.extend_from_slice(&answer.bytes);
                    conn.buf.copy_within(len..conn.have, 0);
                    conn.have -= len;
                    if close {
                        conn.closing = true;
                        break;
                    }
                }
                Head::Incomplete if conn.have < conn.buf.len() => break,
                Head::Incomplete | Head::Other => return Turn::ToRouter,
            }
        }
        if flush(conn).is_err() {
            return Turn::Close;
        }
        // A peer that does not read its answers is not read from either: it waits
        // for room (a writable event), and nothing it sends piles up here.
        if conn.closing {
            continue;
        }
        if !conn.out.is_empty() {
            return Turn::Keep;
        }
        // Requests may still wait in the buffer, now that there is room for answers.
        if owed_enough {
            continue;
        }
        if drained {
            return Turn::Keep;
        }
        let room = conn.buf.len() - conn.have;
        match conn.stream.read(&mut conn.buf[conn.have..]) {
            // The peer is done sending; what is owed still goes out.
            Ok(0) => conn.closing = true,
            Ok(n) => {
                conn.have += n;
                // A stream socket that filled less than the room had nothing more:
                // what arrives later raises a new readiness event. (Saves the read
                // that would only say `WouldBlock`, one system call per request.)
                drained = n < room;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Turn::Keep,
            Err(_) => return Turn::Close,
        }
    }
}

/// Writes what is owed until done or the socket is full.
fn flush<S: Write, A>(conn: &mut Conn<S, A>) -> io::Result<()> {
    let mut at = 0;
    while at < conn.out.len() {
        match conn.stream.write(&conn.out[at..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    conn.out.drain(..at);
    Ok(())
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

    /// The answers at the start of `raw` that are complete (by their length).
    fn complete_answers(raw: &[u8]) -> Vec<String> {
        let mut answers = Vec::new();
        let mut rest = raw;
        while let Some(end) = find(rest, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&rest[..end]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.parse().ok())
                .expect("a content-length");
            if rest.len() < end + 4 + len {
                break;
            }
            answers.push(String::from_utf8_lossy(&rest[..end + 4 + len]).to_string());
            rest = &rest[end + 4 + len..];
        }
        answers
    }

    /// The status thread answers the status requests itself; the router sees the
    /// connection only from its first other request on, that request's bytes first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_requests_stay_on_the_thread_and_the_first_other_goes_to_the_router() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut direct = DirectListener::new(listener, StatusCache::never_started(), IDLE);
        let other = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let status = "GET /status HTTP/1.1\r\nHost: x\r\n\r\n";
            // Three pipelined in one write, then one in two writes.
            s.write_all(status.repeat(3).as_bytes()).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let mut read_until = |s: &mut std::net::TcpStream, n: usize| {
                while complete_answers(&got).len() < n {
                    let k = s.read(&mut buf).expect("the status thread answers");
                    assert!(k > 0, "closed");
                    got.extend_from_slice(&buf[..k]);
                }
            };
            read_until(&mut s, 3);
            s.write_all(&status.as_bytes()[..7]).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(&status.as_bytes()[7..]).unwrap();
            read_until(&mut s, 4);
            s.write_all(other.as_bytes()).unwrap();
            (s, complete_answers(&got))
        });
        let (mut io, _) = tokio::time::timeout(Duration::from_secs(10), direct.accept())
            .await
            .expect("the connection comes to the router");
        let mut head = vec![0u8; other.len()];
        io.read_exact(&mut head).await.unwrap();
        assert_eq!(
            head,
            other.as_bytes(),
            "the router reads the other request first"
        );
        let (mut s, answers) = client.join().unwrap();
        assert_eq!(answers.len(), 4);
        for a in &answers {
            assert!(a.starts_with("HTTP/1.1 200 OK\r\n"), "{a}");
            let body = &a[a.find("\r\n\r\n").unwrap() + 4..];
            let status: serde_json::Value = serde_json::from_str(body).expect("JSON");
            assert_eq!(status["pipeline"]["running"], false, "{body}");
        }
        // From here on the router answers on the same connection.
        io.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap();
        assert!(
            buf[..n].ends_with(b"ok"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
    }

    /// A peer that asks faster than it reads: its answers wait for room without
    /// holding up the thread or piling up unbounded, and when its next request goes
    /// to the router, the answers still owed go out first, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_owed_to_a_slow_reader_come_before_the_routers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const ASKED: usize = 3000;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut direct = DirectListener::new(listener, StatusCache::never_started(), IDLE);
        let other = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let status = "GET /status HTTP/1.1\r\nHost: x\r\n\r\n";
            w.write_all(status.repeat(ASKED).as_bytes()).unwrap();
            w.write_all(other.as_bytes()).unwrap();
        });
        let reader = std::thread::spawn(move || {
            let mut s = s;
            // Not reading for a while: the answers back up into the server.
            std::thread::sleep(Duration::from_millis(300));
            let mut got = Vec::new();
            let mut buf = [0u8; 65536];
            while complete_answers(&got).len() < ASKED + 1 {
                let n = s.read(&mut buf).expect("answers keep coming");
                assert!(
                    n > 0,
                    "closed after {} answers",
                    complete_answers(&got).len()
                );
                got.extend_from_slice(&buf[..n]);
            }
            complete_answers(&got)
        });
        let (mut io, _) = tokio::time::timeout(Duration::from_secs(20), direct.accept())
            .await
            .expect("the connection comes to the router");
        let mut head = vec![0u8; other.len()];
        io.read_exact(&mut head).await.unwrap();
        assert_eq!(head, other.as_bytes());
        io.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        writer.join().unwrap();
        let answers = reader.join().unwrap();
        assert!(
            answers[..ASKED]
                .iter()
                .all(|a| a.contains("\"schema_version\""))
        );
        assert!(answers[ASKED].ends_with("\r\n\r\nok"), "{}", answers[ASKED]);
    }

    /// A connection silent for the idle time goes to the router, which then gets
    /// its next request, a status request too; not sooner than the idle time after
    /// the last request.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_silent_for_the_idle_time_goes_to_the_router() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let idle = Duration::from_millis(200);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut direct = DirectListener::new(listener, StatusCache::never_started(), idle);
        let status = "GET /status HTTP/1.1\r\nHost: x\r\n\r\n";
        let asked = Instant::now();
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(status.as_bytes()).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while complete_answers(&got).is_empty() {
                let n = s.read(&mut buf).expect("the status thread answers");
                assert!(n > 0, "closed");
                got.extend_from_slice(&buf[..n]);
            }
            s
        });
        let (mut io, _) = tokio::time::timeout(Duration::from_secs(10), direct.accept())
            .await
            .expect("the silent connection comes to the router");
        assert!(
            asked.elapsed() >= idle,
            "handed over after {:?}, before the idle time",
            asked.elapsed()
        );
        let mut s = client.join().unwrap();
        s.write_all(status.as_bytes()).unwrap();
        let mut head = vec![0u8; status.len()];
        io.read_exact(&mut head).await.unwrap();
        assert_eq!(head, status.as_bytes(), "the router gets the next request");
        io.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap();
        assert!(buf[..n].ends_with(b"ok"));
    }

    #[tokio::test]
    async fn a_prefixed_stream_reads_its_prefix_then_the_stream() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b" world").await.unwrap();
        drop(a);
        let mut s = Prefixed::new(b, b"hello".to_vec(), Vec::new());
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
