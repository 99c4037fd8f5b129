//! lavender-export's integration tests, one binary with a module per subject. Run
//! one subject with `cargo test -p lavender-export --test it <module>::`.

mod export_files;
mod export_resolve;
