//! The route table: every path the daemon serves, written once. The server's
//! router, the CLI and the HTTP client name routes from here.

/// An HTTP method the API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Post,
}

impl Method {
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One route: a method on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `GET /status`: the status contract (`lavender::status::Status`) and the keys
    /// the daemon adds to it ([`crate::ServedStatus`]).
    Status,
    /// `GET /healthz`: [`crate::Health`].
    Healthz,
    /// `GET /runs`: [`crate::RunInfo`]s, newest first.
    Runs,
    /// `GET /checkpoints[?run=ID]` ([`crate::CheckpointsQuery`]): [`crate::CheckpointInfo`]s.
    Checkpoints,
    /// `GET /logs?lines=N` ([`crate::LogsQuery`]): the pipeline log's last lines, as text.
    Logs,
    /// `POST /pipeline/start`: [`crate::StartRequest`] → [`crate::StartReply`].
    Start,
    /// `POST /pipeline/stop`: [`crate::StopRequest`] → [`crate::StopReport`].
    Stop,
    /// `POST /daemon/restart`: → [`crate::RestartReply`].
    DaemonRestart,
    /// `POST /daemon/reload`: → [`crate::ReloadReport`].
    DaemonReload,
    /// `GET /`: the dashboard page.
    Dashboard,
    /// `GET /metrics`: Prometheus text format.
    Metrics,
    /// `GET /runs/{id}/history?points=N` ([`crate::HistoryQuery`]): a run's curves
    /// ([`crate::HistoryResponse`]).
    History,
    /// `GET /events`: Server-Sent Events, resumable with `Last-Event-ID`.
    Events,
    /// `POST /runs/prune`: [`crate::PruneRequest`] → [`crate::PruneReply`].
    Prune,
}

impl Route {
    pub const ALL: [Route; 14] = [
        Route::Status,
        Route::Healthz,
        Route::Runs,
        Route::Checkpoints,
        Route::Logs,
        Route::Start,
        Route::Stop,
        Route::DaemonRestart,
        Route::DaemonReload,
        Route::Dashboard,
        Route::Metrics,
        Route::History,
        Route::Events,
        Route::Prune,
    ];

    /// The path as the router matches it (`{id}` a segment).
    pub const fn path(self) -> &'static str {
        match self {
            Route::Status => "/status",
            Route::Healthz => "/healthz",
            Route::Runs => "/runs",
            Route::Checkpoints => "/checkpoints",
            Route::Logs => "/logs",
            Route::Start => "/pipeline/start",
            Route::Stop => "/pipeline/stop",
            Route::DaemonRestart => "/daemon/restart",
            Route::DaemonReload => "/daemon/reload",
            Route::Dashboard => "/",
            Route::Metrics => "/metrics",
            Route::History => "/runs/{id}/history",
            Route::Events => "/events",
            Route::Prune => "/runs/prune",
        }
    }

    pub const fn method(self) -> Method {
        match self {
            Route::Start
            | Route::Stop
            | Route::DaemonRestart
            | Route::DaemonReload
            | Route::Prune => Method::Post,
            _ => Method::Get,
        }
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method(), self.path())
    }
}

/// The history of run `id` (`current`: the run the status is about).
pub fn history_path(id: &str) -> String {
    Route::History.path().replace("{id}", id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_one_method_on_one_path() {
        let mut seen = std::collections::HashSet::new();
        for r in Route::ALL {
            assert!(r.path().starts_with('/'), "{r}");
            assert!(seen.insert((r.method(), r.path())), "{r} twice");
        }
        assert_eq!(Route::Stop.to_string(), "POST /pipeline/stop");
        assert_eq!(history_path("current"), "/runs/current/history");
    }
}
