//! lavender's one HTTP/1.1 client, over TCP or the daemon's Unix socket: the CLI
//! (`lavenderd status`, `stop`, …), the tests' kit and the load generator all send
//! their requests through it. Blocking and built on the standard library alone, so
//! a request costs one write, a read or two and two allocations (the head and the
//! body); the daemon's CLI runs it on a blocking thread.
//!
//! - [`Request`] builds a request, to a route of the API's table with
//!   [`Request::to`] (`lavender_api::Route`); [`Request::render`] gives the bytes to
//!   send, once or many times ([`Rendered`]).
//! - [`Connection`] exchanges requests and answers on one stream (kept alive, or
//!   pipelined), decoding bodies framed by `Content-Length`, chunks or the close,
//!   and can hand out a chunked body piece by piece (an event stream).
//! - [`Client`] keeps one connection to a [`Target`], opened when needed and opened
//!   again once when the server had closed a kept-alive one.

mod connection;
mod request;
mod response;
mod target;

pub use connection::{Client, Connection};
pub use request::{Rendered, Request};
pub use response::{Head, Response};
pub use target::{Stream, Target};
