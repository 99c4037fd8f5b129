//! The daemon's client over its Unix socket, for the CLI and the service commands:
//! one request per connection through the workspace's one HTTP/1.1 client
//! (`lavender-client`), on a blocking thread, to a route of the API's table
//! (`lavender-api`). A leaf: it imports nothing of the daemon, so every layer may
//! use it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use lavender_api::{ErrorBody, Route};
use lavender_client::{Connection, Request, Target};
use serde::Serialize;

pub struct Client {
    socket: PathBuf,
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

impl Response {
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(&self.body)
            .with_context(|| format!("unexpected answer from the daemon: {}", self.body))
    }

    /// The `error` of a `{"error": ...}` body, else the body.
    pub fn error_text(&self) -> String {
        ErrorBody::text_of(&self.body)
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
        let asked = self.send(Route::Healthz, None, Some(Duration::from_secs(2)));
        matches!(asked.await, Ok(r) if r.status == 200)
    }

    /// `route` with no body; waits as long as the daemon takes.
    pub async fn request(&self, route: Route) -> Result<Response> {
        self.send(route, None, None).await
    }

    /// `route` with `body` as JSON; waits as long as the daemon takes (a stop waits
    /// for the worker's save).
    pub async fn request_with(&self, route: Route, body: &impl Serialize) -> Result<Response> {
        let body = serde_json::to_string(body).context("write the request's body")?;
        self.send(route, Some(body), None).await
    }

    async fn send(
        &self,
        route: Route,
        body: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<Response> {
        let mut request = Request::to(route).close();
        if let Some(body) = body {
            request = request.json(body);
        }
        let request = request.render();
        let socket = self.socket.clone();
        tokio::task::spawn_blocking(move || {
            let stream = Target::Unix(socket.clone())
                .connect()
                .with_context(|| format!("connect to the daemon at {}", socket.display()))?;
            stream.set_timeouts(timeout)?;
            let answer = Connection::new(stream)
                .exchange(&request)
                .with_context(|| format!("read the daemon's answer to {route}"))?;
            Ok(Response {
                status: answer.status,
                body: answer.text().into_owned(),
            })
        })
        .await
        .context("the request's thread ended early")?
    }
}
