//! Who may change things. Reads (GET/HEAD) are open on the listening address.
//! Anything else needs the Unix socket with our own uid, or, over TCP,
//! `Authorization: Bearer <state/token>`; otherwise 401.

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use tokio::net::UnixListener;

use super::error::ApiError;

#[derive(Clone)]
pub enum Transport {
    Tcp { token: String },
    Unix { uid: u32 },
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

pub async fn require_auth(
    State(transport): State<Transport>,
    req: Request,
    next: Next,
) -> Response {
    if req.method() == Method::GET || req.method() == Method::HEAD {
        return next.run(req).await;
    }
    let allowed = match &transport {
        Transport::Unix { uid } => req
            .extensions()
            .get::<ConnectInfo<UdsPeer>>()
            .and_then(|c| c.0.uid)
            .is_some_and(|peer| peer == *uid),
        Transport::Tcp { token } => req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| super::token::matches(token, given.trim())),
    };
    if allowed {
        next.run(req).await
    } else {
        let msg = match transport {
            Transport::Unix { .. } => {
                "this route changes the pipeline: connect as the daemon's user"
            }
            Transport::Tcp { .. } => {
                "this route changes the pipeline: send `Authorization: Bearer <token>` (the token is in <state_dir>/token) or use the Unix socket"
            }
        };
        ApiError::new(StatusCode::UNAUTHORIZED, msg).into_response()
    }
}
