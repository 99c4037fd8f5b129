//! The data root: its layout (the directory of each thing the pipeline keeps,
//! relative to the data root; the worker writes these, the daemon and the exporter read
//! them, every one of them names a directory from here, never a string of its own),
//! which folder it is when no one says ([`resolve`]), and whether the folder a daemon
//! started on is still that folder ([`Identity`]).

/// The downloaded corpus (the `downloads` step's output).
pub const CORPUS: &str = "corpus";
/// Near-duplicates removed (`dedup`).
pub const DEDUP: &str = "corpus/dedup";
/// Documents that passed the quality filter (`filter`).
pub const FILTERED: &str = "corpus/filtered";
/// Training and held-out shards (`build_shards`).
pub const SHARDS: &str = "shards";
/// Token arrays and the tokenizer (`precompute`).
pub const TOKENS: &str = "tokens";
/// Windows the model found hardest (`mine_hard`).
pub const HARD_EXAMPLES: &str = "hard_examples";
/// Run directories with their checkpoints (`train`).
pub const CHECKPOINTS: &str = "checkpoints";
/// Each pipeline start's log.
pub const LOGS: &str = "logs";

mod identity;
mod recorded;
mod resolve;
#[cfg(test)]
mod tests;

pub use identity::{Identity, RootGone};
pub use recorded::{resolve_recorded, to_recorded};
pub use resolve::{
    Choice, DATA_ROOT_VAR, DataRootEnv, FOLDER_NAME, Resolved, Sources, holds_data_root, resolve,
};
