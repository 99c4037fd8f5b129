//! The query-independent part of SOURCE, paid for once per run: the Hessian
//! passes' outputs, kept under `<run>/attribution/cache/<key>/` (so they go when
//! the run's directory goes) and linked into each later call's fresh bergson run
//! directory.
//!
//! bergson 2.5.1's SOURCE (`bergson/approx_unrolling/pipeline.py`) writes, under
//! its `run_path`:
//! - steps 1 and 3 (a K-FAC covariance pass, then an eigenvalue-correction pass
//!   over the training rows, per checkpoint): `segment_<l>/ckpt_<i>/`;
//! - steps 2 and 4 (per segment, the eigenvectors and the pooled eigenvalue
//!   correction): `segment_<l>/kfac/`;
//!
//! none of which reads the queries. With `overwrite: false` each step skips an
//! output that exists. What depends on the queries (`query/`,
//! `segment_<l>/query_grad*`, `segment_<l>/scores_ckpt_*`, `scores/`) and the
//! cheap Adam preconditioners (`segment_<l>/preconditioner.safetensors`) are
//! written afresh in every call's own directory, so a call never sees another's
//! `query/`.
//!
//! The key hashes everything the Hessian outputs depend on
//! ([`CacheInputs`]); a cache entry is published by one rename once the call that
//! computed it has succeeded, so an entry is never half written.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The bergson the helper runs (it refuses any other), and so the layout above.
pub(crate) const BERGSON_VERSION: &str = "2.5.1";
/// `hessian_cfg.method`, and the name of its output directories.
pub(crate) const METHOD: &str = "kfac";
/// The cache's folder in `<run>/attribution/`.
pub(crate) const CACHE_DIR: &str = "cache";
/// What a cache entry records of its inputs (for people; the key is the hash).
const INPUTS_FILE: &str = "inputs.json";

/// Everything SOURCE's Hessian passes depend on.
#[derive(Debug, Serialize)]
pub(crate) struct CacheInputs {
    pub bergson: &'static str,
    /// Per checkpoint, in order: its directory's name and its files' hashes.
    pub checkpoints: Vec<CheckpointHash>,
    pub segments: usize,
    pub lr_list: Option<Vec<f64>>,
    pub step_size_list: Option<Vec<u64>>,
    pub hessian: HessianSettings,
    /// The training rows as bergson reads them (`train.jsonl`).
    pub train_sha256: String,
}

/// The settings of the config that shape the Hessian passes.
#[derive(Debug, Serialize)]
pub(crate) struct HessianSettings {
    pub method: &'static str,
    pub ev_correction: bool,
    pub precision: &'static str,
    /// Tokens per batch: the factors' sums are rounded per batch.
    pub token_batch_size: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct CheckpointHash {
    pub name: String,
    /// File name → sha256, for the files SOURCE reads.
    pub files: Vec<(String, String)>,
}

/// The files of an exported checkpoint the passes read: the weights and the
/// model's config (`model.safetensors`, `config.json`), and the moments the Adam
/// variant reads (`optimizer.pt`, when present).
const CHECKPOINT_FILES: [&str; 3] = ["model.safetensors", "config.json", "optimizer.pt"];

impl CheckpointHash {
    pub(crate) fn of(dir: &Path) -> Result<CheckpointHash> {
        let mut files = Vec::new();
        for name in CHECKPOINT_FILES {
            let p = dir.join(name);
            if p.is_file() {
                files.push((name.to_string(), sha256_file(&p)?));
            }
        }
        Ok(CheckpointHash {
            name: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            files,
        })
    }
}

impl CacheInputs {
    /// The key: the first 32 hex digits of the inputs' JSON's sha256.
    pub(crate) fn key(&self) -> String {
        let json = serde_json::to_vec(self).expect("plain data serializes");
        hex(&Sha256::digest(&json))[..32].to_string()
    }
}

pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut f =
        fs::File::open(path).with_context(|| format!("could not read {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("could not read {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The query-independent outputs in a bergson run directory of `segments` ×
/// `per_segment` checkpoints, relative to it.
pub(crate) fn hessian_outputs(segments: usize, per_segment: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for l in 0..segments {
        let seg = PathBuf::from(format!("segment_{l}"));
        out.push(seg.join(METHOD));
        for i in 0..per_segment {
            out.push(seg.join(format!("ckpt_{i}")));
        }
    }
    out
}

/// `<run>/attribution/cache/<key>/` when it holds every output, else `None`.
pub(crate) fn lookup(cache_root: &Path, key: &str, outputs: &[PathBuf]) -> Option<PathBuf> {
    let dir = cache_root.join(key);
    outputs.iter().all(|o| dir.join(o).is_dir()).then_some(dir)
}

/// Links each of the cache entry's `outputs` into `source` (a fresh bergson run
/// directory) by a relative symlink, and marks the entry used (its mtime).
pub(crate) fn link(entry: &Path, source: &Path, outputs: &[PathBuf]) -> Result<()> {
    for o in outputs {
        let at = source.join(o);
        let parent = at.parent().expect("outputs are under a segment");
        fs::create_dir_all(parent)
            .with_context(|| format!("could not create {}", parent.display()))?;
        let target = relative(&entry.join(o), parent);
        std::os::unix::fs::symlink(&target, &at).with_context(|| {
            format!(
                "could not link {} to {}",
                at.display(),
                entry.join(o).display()
            )
        })?;
    }
    fs::File::open(entry)
        .and_then(|f| f.set_modified(SystemTime::now()))
        .with_context(|| format!("could not mark {} used", entry.display()))?;
    Ok(())
}

/// Moves `outputs` from `source` (a bergson run directory that has just computed
/// them) into a new cache entry `<cache_root>/<key>/`, leaving links in their
/// place so `source` stays a whole run. When another call published the same key
/// meanwhile, its entry is kept (the same inputs) and these outputs stay where
/// they are.
pub(crate) fn publish(
    source: &Path,
    cache_root: &Path,
    key: &str,
    outputs: &[PathBuf],
    inputs: &CacheInputs,
) -> Result<PathBuf> {
    let entry = cache_root.join(key);
    if lookup(cache_root, key, outputs).is_some() {
        return Ok(entry);
    }
    for o in outputs {
        if !source.join(o).is_dir() {
            bail!(
                "bergson wrote no {} in {}: its SOURCE layout is not bergson {BERGSON_VERSION}'s",
                o.display(),
                source.display()
            );
        }
    }
    let staging = cache_root.join(format!(".{key}.{}.partial", std::process::id()));
    fs::create_dir_all(&staging)
        .with_context(|| format!("could not create {}", staging.display()))?;
    for o in outputs {
        let to = staging.join(o);
        fs::create_dir_all(to.parent().expect("under a segment"))?;
        fs::rename(source.join(o), &to).with_context(|| {
            format!(
                "could not move {} into {}",
                source.join(o).display(),
                to.display()
            )
        })?;
    }
    let mut text = serde_json::to_vec_pretty(inputs)?;
    text.push(b'\n');
    fs::write(staging.join(INPUTS_FILE), text)?;
    let published = match fs::rename(&staging, &entry) {
        Ok(()) => entry.clone(),
        // Published by another call meanwhile: keep ours where it was made.
        Err(_) if entry.is_dir() => {
            for o in outputs {
                fs::rename(staging.join(o), source.join(o))?;
            }
            fs::remove_dir_all(&staging).ok();
            return Ok(entry);
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "could not rename {} to {}",
                    staging.display(),
                    entry.display()
                )
            });
        }
    };
    for o in outputs {
        let at = source.join(o);
        let target = relative(&published.join(o), at.parent().expect("under a segment"));
        std::os::unix::fs::symlink(&target, &at)
            .with_context(|| format!("could not link {}", at.display()))?;
    }
    Ok(published)
}

/// `to` relative to the directory `from` (both absolute, on the same root), so a
/// link survives the run directory being moved.
fn relative(to: &Path, from: &Path) -> PathBuf {
    let to: Vec<_> = to.components().collect();
    let from: Vec<_> = from.components().collect();
    let common = to.iter().zip(&from).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(train: &str) -> CacheInputs {
        CacheInputs {
            bergson: BERGSON_VERSION,
            checkpoints: vec![CheckpointHash {
                name: "checkpoint-4".into(),
                files: vec![("model.safetensors".into(), "ab".into())],
            }],
            segments: 1,
            lr_list: Some(vec![0.001]),
            step_size_list: Some(vec![4]),
            hessian: HessianSettings {
                method: METHOD,
                ev_correction: true,
                precision: "fp32",
                token_batch_size: 4096,
            },
            train_sha256: train.into(),
        }
    }

    #[test]
    fn the_key_changes_with_every_input() {
        let base = inputs("t").key();
        assert_eq!(base, inputs("t").key());
        assert_eq!(base.len(), 32);
        assert_ne!(base, inputs("u").key());
        let mut i = inputs("t");
        i.checkpoints[0].files[0].1 = "ac".into();
        assert_ne!(base, i.key());
        let mut i = inputs("t");
        i.segments = 2;
        assert_ne!(base, i.key());
        let mut i = inputs("t");
        i.lr_list = Some(vec![0.002]);
        assert_ne!(base, i.key());
        let mut i = inputs("t");
        i.hessian.token_batch_size = 128;
        assert_ne!(base, i.key());
    }

    #[test]
    fn published_outputs_are_linked_into_a_fresh_run_and_found_again() {
        let dir = tempfile::tempdir().unwrap();
        let attribution = dir.path().join("run/attribution");
        let cache = attribution.join(CACHE_DIR);
        let outputs = hessian_outputs(2, 1);
        assert_eq!(
            outputs,
            [
                PathBuf::from("segment_0/kfac"),
                "segment_0/ckpt_0".into(),
                "segment_1/kfac".into(),
                "segment_1/ckpt_0".into()
            ]
        );
        let first = attribution.join("t1/source");
        for o in &outputs {
            fs::create_dir_all(first.join(o)).unwrap();
            fs::write(first.join(o).join("factor"), o.display().to_string()).unwrap();
        }
        fs::create_dir_all(first.join("query")).unwrap();
        assert!(lookup(&cache, "k", &outputs).is_none());
        let entry = publish(&first, &cache, "k", &outputs, &inputs("t")).unwrap();
        assert_eq!(entry, cache.join("k"));
        assert!(entry.join(INPUTS_FILE).is_file());
        // The first run stays whole, through links; its query/ is its own.
        for o in &outputs {
            assert!(first.join(o).is_symlink());
            assert_eq!(
                fs::read_to_string(first.join(o).join("factor")).unwrap(),
                o.display().to_string()
            );
        }
        assert!(!entry.join("query").exists());
        assert_eq!(lookup(&cache, "k", &outputs), Some(entry.clone()));
        assert!(lookup(&cache, "other", &outputs).is_none());

        let second = attribution.join("t2/source");
        link(&entry, &second, &outputs).unwrap();
        for o in &outputs {
            assert_eq!(
                fs::read_to_string(second.join(o).join("factor")).unwrap(),
                o.display().to_string()
            );
        }
        assert!(!second.join("query").exists());
        // Relative links: the run directory can move.
        let moved = dir.path().join("moved");
        fs::rename(dir.path().join("run"), &moved).unwrap();
        assert!(
            moved
                .join("attribution/t2/source/segment_1/kfac/factor")
                .is_file()
        );
    }

    #[test]
    fn a_run_without_an_output_is_not_published() {
        let dir = tempfile::tempdir().unwrap();
        let outputs = hessian_outputs(1, 2);
        fs::create_dir_all(dir.path().join("source/segment_0/kfac")).unwrap();
        let err = publish(
            &dir.path().join("source"),
            &dir.path().join(CACHE_DIR),
            "k",
            &outputs,
            &inputs("t"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("segment_0/ckpt_0"), "{err}");
        assert!(!dir.path().join(CACHE_DIR).join("k").exists());
    }
}
