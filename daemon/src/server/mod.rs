//! The HTTP API: one axum router, served by axum on TCP (loopback by default,
//! `TCP_NODELAY`) and on the Unix socket `<state_dir>/lavenderd.sock` (0600). Each
//! listener's router sits behind one guard (`auth.rs`): over TCP the `Host` must name
//! this daemon (421 otherwise) and changes need the token; on the socket, our uid.
//! `GET /status` and `GET /healthz` are answered from memory with no layer of their
//! own: the status body is composed ahead by the refresher (`status/cache.rs`), so a
//! request writes the timestamp in front of it. Shutdown is axum's graceful one: the
//! listeners close, open requests finish, and event streams end when the feed closes.

pub mod auth;
pub mod error;
pub mod routes;
pub mod strict_json;
pub mod token;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::handler::Handler;
use axum::http::StatusCode;
use axum::routing::{MethodFilter, on};
use axum::serve::ListenerExt as _;
use axum::{Router, ServiceExt as _};
use lavender_api::{Method, Route};
use tokio::net::{TcpListener, UnixListener};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use crate::pipeline::PipelineHandle;
use crate::status::StatusCache;
use crate::web::WebState;
use auth::{Guarded, TcpAccess, Transport, UdsPeer};
use lavender::layout::Layout;

/// Request bodies are tiny JSON objects.
pub const BODY_LIMIT: usize = 64 * 1024;
/// Every route but the stop answers well within this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A stop waits for the worker's save; bounded all the same.
pub const STOP_REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Clone)]
pub struct AppState {
    pub pipeline: PipelineHandle,
    pub cache: StatusCache,
    pub layout: Layout,
    pub web: WebState,
    /// Restarts the daemon alone (`POST /daemon/restart`); `None` for a daemon in a
    /// terminal (`start --foreground`).
    pub restart: Option<RestartRequests>,
    /// Asks the daemon's serving loop to read its config again (`POST /daemon/reload`).
    pub reload: ReloadRequests,
    /// When this daemon image started serving (RFC 3339 UTC, milliseconds): the pid
    /// survives a restart alone, this tells the old image from the new one.
    pub started_at: Arc<str>,
}

/// Asks the daemon's serving loop to restart the daemon alone.
pub type RestartRequests = tokio::sync::mpsc::Sender<()>;

/// Where a reload's answer goes.
pub type ReloadReply = tokio::sync::oneshot::Sender<Result<lavender_api::ReloadReport, String>>;
/// Asks the daemon's serving loop to reload its config, as SIGHUP does.
pub type ReloadRequests = tokio::sync::mpsc::Sender<ReloadReply>;

/// The status route extracts the cache alone: extracting the whole state would clone
/// it (paths included) for every request.
impl axum::extract::FromRef<AppState> for crate::status::StatusCache {
    fn from_ref(app: &AppState) -> Self {
        app.cache.clone()
    }
}

/// A router's routes named from the API's table: its path, answered by `handler`
/// on its method alone.
trait Answer {
    fn answer<H: Handler<T, AppState>, T: 'static>(self, route: Route, handler: H) -> Self;
}

impl Answer for Router<AppState> {
    fn answer<H: Handler<T, AppState>, T: 'static>(self, route: Route, handler: H) -> Self {
        let method = match route.method() {
            Method::Get => MethodFilter::GET,
            Method::Post => MethodFilter::POST,
        };
        self.route(route.path(), on(method, handler))
    }
}

/// Every route; `serve` puts the guard of each transport around it.
pub fn router(app: AppState) -> Router {
    // Answered from memory, with no layer of their own: they cannot hang (no timeout to arm) and
    // take no body (no limit). Any other method on them is 405 before a handler runs.
    // The status route is the one clients poll, so every per-request cost here is
    // paid thousands of times a second.
    let hot = Router::new()
        .answer(Route::Status, routes::status::get)
        .answer(Route::Healthz, routes::healthz::get);
    let quick = Router::new()
        .answer(Route::Runs, routes::runs::get)
        .answer(Route::Checkpoints, routes::checkpoints::get)
        .answer(Route::Logs, routes::logs::get)
        .answer(Route::Start, routes::start::post)
        .answer(Route::DaemonRestart, routes::restart::post)
        .answer(Route::DaemonReload, routes::reload::post)
        .answer(Route::Dashboard, routes::dashboard::get)
        .answer(Route::Metrics, routes::metrics::get)
        .answer(Route::History, routes::history::get)
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ));
    // A prune deletes gigabytes.
    let slow = Router::new()
        .answer(Route::Stop, routes::stop::post)
        .answer(Route::Prune, routes::prune::post)
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            STOP_REQUEST_TIMEOUT,
        ));
    // A stream lasts as long as the client stays; it ends when the feed closes.
    let streams = Router::new().answer(Route::Events, routes::events::get);
    let rest = quick
        .merge(slow)
        .merge(streams)
        .layer(RequestBodyLimitLayer::new(BODY_LIMIT));
    hot.merge(rest).with_state(app)
}

/// Binds TCP; a non-loopback address needs `allow_non_loopback`.
pub async fn bind_tcp(addr: SocketAddr, allow_non_loopback: bool) -> Result<TcpListener> {
    if !addr.ip().is_loopback() && !allow_non_loopback {
        bail!(
            "refusing to listen on {addr}: not a loopback address. Pass --allow-non-loopback (or set supervisor.allow_non_loopback: true) to expose the API; every route then needs the token (reads too, unless api.public_reads) and a Host named in api.allowed_hosts"
        );
    }
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("listen on {addr} (config key supervisor.listen, flag --listen)"))
}

/// Binds the Unix socket, replacing a stale file (the caller holds the instance
/// lock, so no live daemon owns it), and restricts it to mode 0600.
pub fn bind_unix(path: &Path) -> Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::info!(socket = %path.display(), "removed a stale socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("remove stale socket {}", path.display())),
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("bind socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("restrict socket {} to mode 0600", path.display()))?;
    Ok(listener)
}

/// Serves both listeners until `shutdown` resolves.
pub async fn serve(
    app: AppState,
    tcp: TcpListener,
    unix: UnixListener,
    access: TcpAccess,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let uid = nix::unistd::getuid().as_raw();
    // Open event streams end first, so graceful shutdown does not wait on them.
    let feed = app.web.feed.clone();
    let mut closing = shutdown.clone();
    tokio::spawn(async move {
        let _ = closing.wait_for(|v| *v).await;
        feed.close();
    });
    if let Ok(addr) = tcp.local_addr() {
        access.warn_if_unnamed(addr);
    }
    let tcp_service = Guarded::new(router(app.clone()), Transport::Tcp(Arc::new(access)));
    let unix_service = Guarded::new(router(app), Transport::Unix { uid });
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    // Answers go out at once, not held back to be coalesced with a next write.
    let tcp = tcp.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY on a connection: {e}");
        }
    });
    let tcp_server = axum::serve(tcp, tcp_service.into_make_service())
        .with_graceful_shutdown(wait(shutdown.clone()));
    let unix_server = axum::serve(
        unix,
        unix_service.into_make_service_with_connect_info::<UdsPeer>(),
    )
    .with_graceful_shutdown(wait(shutdown));
    let (a, b) = tokio::join!(tcp_server, unix_server);
    a.context("TCP server")?;
    b.context("Unix socket server")?;
    Ok(())
}
