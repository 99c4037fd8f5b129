//! Replication: a copy of each complete checkpoint off the machine (`replicate:` in
//! the config), through the Arrow project's `object_store` (S3 and S3-compatible
//! servers, a mounted folder for `file://`), kept out of the core library so it has no
//! HTTP stack.
//!
//! Remote layout, under the URL's prefix:
//! `<run>/<checkpoint>/<file>` for every file of the checkpoint (its `manifest.json`
//! and `trainer_state.json` included), then `<run>/<checkpoint>/`[`manifest::FILE`],
//! the remote manifest, written last: the remote commit marker. A checkpoint without
//! it is incomplete (an upload cut short) and is uploaded again, never restored.
//!
//! - [`upload`]: one checkpoint up, then read back (HEAD size, GET and hash).
//! - [`restore`]: one checkpoint down into a run folder, verified before it appears.
//!   Everything read from the bucket is untrusted: names, paths and sizes are checked
//!   ([`manifest::RemoteManifest::check`]) before any local path is built from them.
//! - [`signing`]: authenticated copies (`replicate.signing_key_file`).
//! - `retention`: which remote checkpoints `replicate.keep` drops.
//! - `alarm`: the alert when the copy falls behind or uploads keep failing, and
//!   when it catches up (pure; a watcher feeds it the status each second).
//! - [`replicator`]: the daemon's task that uploads each new checkpoint, told of
//!   saves by the one follower of `events.jsonl`, never blocking anything else.

mod alarm;
pub mod manifest;
pub mod remote;
pub mod replicator;
pub mod restore;
mod retention;
pub mod signing;
mod state;
mod throttle;
pub mod upload;

pub use remote::Remote;
pub use replicator::Replication;
