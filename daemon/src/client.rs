//! The daemon's client over its Unix socket, for the CLI and the service commands:
//! one request per connection through the workspace's one HTTP/1.1 client
//! (`lavender-client`), on a blocking thread, to an endpoint of the API
//! (`lavender_api::endpoint`: a route with its request and reply types, so a body
//! goes only to its route and an answer is read only as its reply). A leaf: it imports nothing of the daemon, so every layer may
//! use it.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use lavender_api::endpoint::Healthz;
use lavender_api::{Endpoint, ErrorBody};
use lavender_client::{Connection, Request, Target};

pub struct Client {
    socket: PathBuf,
}

/// The daemon's answer to a request to endpoint `E`: its status, and its body read
/// as `E`'s reply (a `200`) or as an error.
#[derive(Debug)]
pub struct Answer<E> {
    pub status: u16,
    pub body: String,
    endpoint: PhantomData<fn() -> E>,
}

impl<E: Endpoint> Answer<E> {
    /// The body as the endpoint's reply.
    pub fn reply(&self) -> Result<E::Reply> {
        serde_json::from_str(&self.body).with_context(|| {
            format!(
                "unexpected answer from the daemon to {}: {}",
                E::ROUTE,
                self.body
            )
        })
    }

    /// The `error` of a `{"error": ...}` body, else the body.
    pub fn error_text(&self) -> String {
        ErrorBody::text_of(&self.body)
    }

    /// The reply of a `200`, else the daemon's error as the error.
    pub fn ok(&self) -> Result<E::Reply> {
        if self.status != 200 {
            anyhow::bail!("{}", self.error_text());
        }
        self.reply()
    }
}

impl Client {
    pub fn new(socket: &Path) -> Client {
        Client {
            socket: socket.to_path_buf(),
        }
    }

    /// True when a daemon answers on the socket within 2 s.
    pub async fn is_up(&self) -> bool {
        let asked = self.send::<Healthz>(&(), Some(Duration::from_secs(2)));
        matches!(asked.await, Ok(r) if r.status == 200)
    }

    /// A request to endpoint `E` with its body (`&()` where it takes none); waits as
    /// long as the daemon takes (a stop waits for the worker's save).
    pub async fn call<E: Endpoint>(&self, request: &E::Request) -> Result<Answer<E>> {
        self.send::<E>(request, None).await
    }

    async fn send<E: Endpoint>(
        &self,
        body: &E::Request,
        timeout: Option<Duration>,
    ) -> Result<Answer<E>> {
        let route = E::ROUTE;
        let mut request = Request::to(route).close();
        if E::BODY {
            let body = serde_json::to_string(body).context("write the request's body")?;
            request = request.json(body);
        }
        let request = request.render();
        let socket = self.socket.clone();
        let (status, body) = tokio::task::spawn_blocking(move || {
            let stream = Target::Unix(socket.clone())
                .connect()
                .with_context(|| format!("connect to the daemon at {}", socket.display()))?;
            stream.set_timeouts(timeout)?;
            let answer = Connection::new(stream)
                .exchange(&request)
                .with_context(|| format!("read the daemon's answer to {route}"))?;
            anyhow::Ok((answer.status, answer.text().into_owned()))
        })
        .await
        .context("the request's thread ended early")??;
        Ok(Answer {
            status,
            body,
            endpoint: PhantomData,
        })
    }
}
