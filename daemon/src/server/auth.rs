//! Who may use the API: one guard around each listener's whole router, so no route
//! (nor the 404 of a route that does not exist) escapes it.
//!
//! - Over TCP the request must name this daemon in its `Host` (the `api` config
//!   section): a loopback name or address, or an entry of `api.allowed_hosts`;
//!   another name gets 421, so a web page whose own name was rebound to 127.0.0.1
//!   (DNS rebinding) reads nothing. A request without `Host` gets 400 (HTTP/1.1
//!   requires it; a browser always sends it).
//! - Reads (GET, HEAD) are then open, except on a daemon allowed to listen beyond
//!   loopback (`--allow-non-loopback`), where they need the token too unless
//!   `api.public_reads`.
//! - Anything else needs the Unix socket with our own uid or, over TCP,
//!   `Authorization: Bearer <state/token>`; otherwise 401.
//!
//! The Unix socket (0600, our uid only) is exempt from the `Host` check.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{ConnectInfo, Request};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use futures_util::future::Either;
use lavender::config::{ApiConfig, HostPort};
use tokio::net::UnixListener;

use super::error::ApiError;

#[derive(Clone)]
pub enum Transport {
    Tcp(Arc<TcpAccess>),
    Unix { uid: u32 },
}

/// What a request over TCP must show.
pub struct TcpAccess {
    token: String,
    api: ApiConfig,
    /// Reads need the token too (a daemon allowed beyond loopback, reads not public).
    reads_need_token: bool,
}

impl TcpAccess {
    pub fn new(token: String, api: ApiConfig, allow_non_loopback: bool) -> TcpAccess {
        let reads_need_token = allow_non_loopback && !api.public_reads;
        TcpAccess {
            token,
            api,
            reads_need_token,
        }
    }

    /// A daemon listening beyond loopback with no `api.allowed_hosts` answers only
    /// requests naming localhost: say so once, at start.
    pub fn warn_if_unnamed(&self, listening: std::net::SocketAddr) {
        if !listening.ip().is_loopback() && self.api.allowed_hosts.is_empty() {
            tracing::warn!(
                "listening on {listening} beyond loopback, but api.allowed_hosts is empty: requests naming this machine other than as localhost get 421; list the names clients use in api.allowed_hosts"
            );
        }
    }

    /// `Ok` when the request names this daemon: its target's authority (an
    /// absolute-form request) or else its one `Host` header.
    fn check_host(&self, req: &Request) -> Result<(), ApiError> {
        let text = match req.uri().authority() {
            Some(authority) => authority.as_str(),
            None => {
                let mut hosts = req.headers().get_all(header::HOST).iter();
                match (hosts.next(), hosts.next()) {
                    (None, _) => {
                        return Err(bad_request(
                            "a request over TCP must carry a Host header naming the daemon (localhost, 127.0.0.1 or [::1]; or an entry of api.allowed_hosts)",
                        ));
                    }
                    (Some(_), Some(_)) => {
                        return Err(bad_request(
                            "a request may carry one Host header only; send one naming the daemon",
                        ));
                    }
                    (Some(value), None) => value.to_str().unwrap_or(""),
                }
            }
        };
        let Some(host) = HostPort::parse(text) else {
            return Err(bad_request(format!(
                "Host {text:?} is not a host name or address with an optional port; send localhost, 127.0.0.1 or [::1]"
            )));
        };
        if self.api.allows(&host) {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "Host `{text}` does not name this daemon: over TCP it answers requests for localhost, 127.0.0.1 or [::1] only (a guard against DNS rebinding); add the name to api.allowed_hosts in the config to allow it"
                ),
            ))
        }
    }

    fn bearer_matches(&self, req: &Request) -> bool {
        req.headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| super::token::matches(&self.token, given.trim()))
    }
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

impl Transport {
    /// Why `req` is refused; `None` lets it through.
    fn refusal(&self, req: &Request) -> Option<ApiError> {
        let read = matches!(*req.method(), Method::GET | Method::HEAD);
        let message = match self {
            Transport::Tcp(access) => {
                if let Err(e) = access.check_host(req) {
                    return Some(e);
                }
                if (read && !access.reads_need_token) || access.bearer_matches(req) {
                    return None;
                }
                if read {
                    "this daemon may listen beyond loopback, so reads need the token too: send `Authorization: Bearer <token>` (the token is in <state_dir>/token), use the Unix socket, or set api.public_reads: true"
                } else {
                    "this route changes the pipeline: send `Authorization: Bearer <token>` (the token is in <state_dir>/token) or use the Unix socket"
                }
            }
            Transport::Unix { uid } => {
                let peer = req
                    .extensions()
                    .get::<ConnectInfo<UdsPeer>>()
                    .and_then(|c| c.0.uid);
                if read || peer == Some(*uid) {
                    return None;
                }
                "this route changes the pipeline: connect as the daemon's user"
            }
        };
        Some(ApiError::new(StatusCode::UNAUTHORIZED, message))
    }
}

/// A service (the router) behind the guard of its transport.
#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    transport: Transport,
}

impl<S> Guarded<S> {
    pub fn new(inner: S, transport: Transport) -> Guarded<S> {
        Guarded { inner, transport }
    }
}

impl<S> tower::Service<Request> for Guarded<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Ready<Result<Response, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        match self.transport.refusal(&req) {
            None => Either::Right(self.inner.call(req)),
            Some(refused) => Either::Left(ready(Ok(refused.into_response()))),
        }
    }
}

/// The peer of a Unix-socket connection (SO_PEERCRED / getpeereid).
#[derive(Clone, Debug)]
pub struct UdsPeer {
    pub uid: Option<u32>,
}

impl axum::extract::connect_info::Connected<IncomingStream<'_, UnixListener>> for UdsPeer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        UdsPeer {
            uid: stream.io().peer_cred().ok().map(|c| c.uid()),
        }
    }
}
