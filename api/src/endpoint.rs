//! Each JSON route with its request and reply types, checked by the compiler: a
//! client names an [`Endpoint`] and passes its `Request`, so it cannot send one
//! route another's body, nor read an answer as another route's reply. The server's
//! handlers take and give the same types (`daemon/src/server/routes/`).
//!
//! ```text
//! client.call::<Start>(&StartRequest { … })  -> Answer: status, then .reply() -> StartReply
//! client.call::<Healthz>(&())                -> … .reply() -> Health
//! ```
//!
//! The routes that are not JSON (the dashboard, `/metrics`, `/logs`, `/events`) and
//! the queried ones the dashboard and loadgen read (`/checkpoints`, a run's
//! history) keep to the route table ([`Route`]).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Route;

/// A route and the types of what it takes and answers.
pub trait Endpoint {
    /// The route, on its method and path.
    const ROUTE: Route;
    /// The JSON body a request carries; `()` where the route takes none.
    type Request: Serialize;
    /// The JSON body of its `200` answer (any other status carries an
    /// [`ErrorBody`](crate::ErrorBody)).
    type Reply: DeserializeOwned;
    /// Whether a request has a body ([`Endpoint::Request`] is not `()`).
    const BODY: bool;
}

macro_rules! endpoints {
    ($($(#[$doc:meta])* $name:ident: $route:ident, $request:ty => $reply:ty, body: $body:expr;)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            pub struct $name;

            impl Endpoint for $name {
                const ROUTE: Route = Route::$route;
                type Request = $request;
                type Reply = $reply;
                const BODY: bool = $body;
            }
        )*
    };
}

endpoints! {
    /// `GET /status`.
    Status: Status, () => crate::ServedStatus, body: false;
    /// `GET /healthz`.
    Healthz: Healthz, () => crate::Health, body: false;
    /// `GET /runs`, newest first.
    Runs: Runs, () => Vec<crate::RunInfo>, body: false;
    /// `POST /pipeline/start`.
    Start: Start, crate::StartRequest => crate::StartReply, body: true;
    /// `POST /pipeline/stop`.
    Stop: Stop, crate::StopRequest => crate::StopReport, body: true;
    /// `POST /runs/prune`.
    Prune: Prune, crate::PruneRequest => crate::PruneReply, body: true;
    /// `POST /daemon/restart`.
    DaemonRestart: DaemonRestart, () => crate::RestartReply, body: false;
    /// `POST /daemon/reload`.
    DaemonReload: DaemonReload, () => crate::ReloadReport, body: false;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn takes_body<E: Endpoint>() -> bool {
        E::BODY
    }

    #[test]
    fn an_endpoint_takes_a_body_exactly_when_its_route_is_a_post_with_a_request() {
        assert_eq!(Start::ROUTE, Route::Start);
        assert!(takes_body::<Start>() && takes_body::<Stop>() && takes_body::<Prune>());
        assert!(!takes_body::<Status>() && !takes_body::<Healthz>() && !takes_body::<Runs>());
        assert!(!takes_body::<DaemonRestart>() && !takes_body::<DaemonReload>());
        assert_eq!(
            std::any::type_name::<<Start as Endpoint>::Request>(),
            std::any::type_name::<crate::StartRequest>()
        );
    }
}
