//! Checkpoints: `<run>/<stage>-<HH-MM-SS>-<NNNN>/` directories, complete once their
//! `trainer_state.json` exists and parses; `contents` is what each should hold. Naming, listing, retention, run pruning.

mod builder;
pub mod contents;
pub mod drills;
pub mod fallback;
mod listing;
mod name;
mod prune;
mod retention;
pub mod untrusted;
pub mod verdicts;

pub use builder::CheckpointBuilder;
pub use listing::{
    Checkpoint, EXPORT_MARKER, is_complete, latest_complete, list_checkpoints,
    list_run_checkpoints, newest_complete, next_counter, resolve_resume,
};
pub use name::{CheckpointName, valid_stage_name};
pub use prune::{PruneReport, dir_size, prune_plan, prune_runs, remove_runs};
pub use retention::{DEFAULT_KEEP, RetentionPolicy, enforce_retention, enforce_retention_with};
