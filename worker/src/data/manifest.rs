//! Step manifests (`manifest.json`, written last by each data step).
//!
//! Mirrors `lavender::manifest` (core-api.md: same paths, same JSON) until that module is
//! on main; then this file shrinks to `pub use lavender::manifest::*`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub const FILE: &str = "manifest.json";

/// Each data step's output directory, relative to the data root; its manifest lives there.
pub const STEP_DIRS: &[(&str, &str)] = &[
    ("downloads", "corpus"),
    ("dedup", "corpus/dedup"),
    ("filter", "corpus/filtered"),
    ("build_shards", "shards"),
    ("precompute", "tokens"),
    ("mine_hard", "hard_examples"),
];

pub fn step_dir(data_root: &Path, step: &str) -> PathBuf {
    let dir = STEP_DIRS
        .iter()
        .find(|(name, _)| *name == step)
        .map_or(step, |(_, dir)| dir);
    data_root.join(dir)
}

pub fn manifest_path(data_root: &Path, step: &str) -> PathBuf {
    step_dir(data_root, step).join(FILE)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFingerprint {
    pub path: PathBuf,
    pub size: u64,
    pub mtime_ns: u64,
    #[serde(default)]
    pub sha256: Option<String>,
}

impl InputFingerprint {
    pub fn matches(&self, other: &InputFingerprint) -> bool {
        if self.path != other.path {
            return false;
        }
        match (&self.sha256, &other.sha256) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            _ => self.size == other.size && self.mtime_ns == other.mtime_ns,
        }
    }
}

/// Size and mtime of `path` (no hash: cheap enough for every run's freshness check).
pub fn fingerprint(path: &Path) -> Result<InputFingerprint> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("could not read metadata of {}", path.display()))?;
    let mtime_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    Ok(InputFingerprint {
        path: path.to_path_buf(),
        size: meta.len(),
        mtime_ns,
        sha256: None,
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepManifest {
    pub step: String,
    pub version: u32,
    pub config_hash: String,
    #[serde(default)]
    pub inputs: Vec<InputFingerprint>,
    #[serde(default)]
    pub counts: BTreeMap<String, u64>,
    /// Output paths, relative to the step's directory.
    #[serde(default)]
    pub outputs: Vec<String>,
    pub finished_at: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl StepManifest {
    pub fn is_fresh(&self, inputs: &[InputFingerprint], config_hash: &str) -> bool {
        if self.config_hash != config_hash || self.inputs.len() != inputs.len() {
            return false;
        }
        inputs.iter().all(|now| {
            self.inputs
                .iter()
                .find(|then| then.path == now.path)
                .is_some_and(|then| then.matches(now))
        })
    }
}

/// `Ok(None)` when the step has not finished; an error names a damaged manifest.
pub fn read(data_root: &Path, step: &str) -> Result<Option<StepManifest>> {
    let path = manifest_path(data_root, step);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("could not read step manifest {}", path.display()));
        }
    };
    serde_json::from_slice(&bytes).map(Some).with_context(|| {
        format!(
            "step manifest {} is malformed; rerun `lavender-worker {step} --force`",
            path.display()
        )
    })
}

/// Atomic write; call it after every output is in place (its presence means "done").
pub fn write(data_root: &Path, manifest: &StepManifest) -> Result<()> {
    let path = manifest_path(data_root, &manifest.step);
    let dir = path.parent().expect("manifest has a directory");
    std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    super::stage::write_file_atomic(&path, &serde_json::to_vec_pretty(manifest)?)
}
