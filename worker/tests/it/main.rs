//! lavender-worker's integration tests, one binary (one link of the test kit and its
//! dependencies) with a module per subject. Run one subject with
//! `cargo test -p lavender-worker --test it <module>::`.

mod attribution_bergson;
mod daemon_e2e;
mod damaged_resume;
mod data_downloads;
mod data_interrupt;
mod data_pipeline;
mod data_steps;
mod disk_full;
mod drill;
mod export_hf;
mod project_folder;
mod readme_commands;
mod replay_check;
mod replicate_s3;
mod scale_notice;
mod storage_error;
mod tracking;
mod train_hf_layout;
mod train_inference;
mod train_manifest;
mod train_optimizer_state;
mod train_resume;
mod train_stages;
