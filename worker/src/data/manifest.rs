//! Step manifests live in `lavender::manifest`; this adds where each step's outputs are.

use std::path::{Path, PathBuf};

pub use lavender::manifest::*;

/// The directory a step's manifest and outputs live in (`corpus`, `corpus/dedup`, …).
pub fn step_dir(data_root: &Path, step: &str) -> PathBuf {
    manifest_path(data_root, step)
        .parent()
        .expect("a manifest path has a directory")
        .to_path_buf()
}
