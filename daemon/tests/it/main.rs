//! lavenderd's integration tests, one binary (one link of the test kit and its
//! dependencies) with a module per subject. Run one subject with
//! `cargo test -p lavenderd --test it <module>::`.

mod api;
mod architecture;
mod circles;
mod cli_commands;
mod config_reload;
mod data_root;
mod deadman;
mod decisions;
mod doc_commands;
mod goodput;
mod hang_evidence;
mod lifecycle;
mod operations_doc;
mod push_alerts;
mod push_down;
mod push_e2e;
mod push_loopback;
mod push_support;
mod python_damage;
mod python_hf;
mod python_lightning;
mod python_torchrun;
mod readme_api;
mod replay_protocol;
mod replicate_faults;
mod replicate_untrusted;
mod service_notify;
mod service_units;
mod slurm_cluster;
mod slurm_e2e;
mod status_watch;
mod supervision;
mod tracking_hf;
mod verify;
mod web_browser;
mod web_events;
mod web_history;
mod web_metrics;
mod web_terminal;
