//! Support for lavender's integration tests, shared by the packages' test binaries:
//! the real `lavenderd` driven on a test data root (with the fake worker, a Python
//! worker or the real one), the one HTTP client of its TCP port and socket, a reader
//! of its event stream, the status-schema check, and a generated corpus.
//!
//! A library rather than a `mod` each test binary includes: rustc judges its dead
//! code once, not per binary (where whatever one test leaves unused warns).

mod bins;
mod corpus;
mod daemon;
pub mod damage;
pub mod data_steps;
pub mod doc_blocks;
pub mod fabricated_run;
pub mod failfs;
mod fake_env;
pub mod http;
pub mod mlflow;
#[cfg(feature = "notify")]
pub mod notify;
mod process;
pub mod python;
mod routes;
mod run_dir;
pub mod s3;
mod schema;
pub mod sse;
mod terminal;
pub mod training;
mod wait;

use std::path::{Path, PathBuf};

pub use bins::lavenderd;
pub use corpus::{WORDS, write_speeches};
pub use daemon::{BACKOFF_VAR, Lavenderd, backoff_seconds};
pub use fake_env::Env;
pub use http::{Http, KeepAlive};
pub use process::{
    alive, children, cmdline, freeze_group, send_signal, service_shims, stderr, stdout,
    write_executable,
};
pub use routes::router_routes;
pub use run_dir::{events, heartbeat_step, read_json};
pub use schema::{assert_valid, schema, schema_path};
pub use terminal::{TerminalRun, run_on_terminal};
pub use wait::wait_until;

/// The repository's root: this checkout.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ sits in the repository")
        .to_path_buf()
}
