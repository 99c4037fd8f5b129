//! Step manifests: `manifest.json` written LAST by each data step into its output
//! directory. A manifest records what the step read (input fingerprints + config
//! hash) and produced (counts, outputs), so a rerun can be skipped when nothing
//! changed and the status can report data counts without listing directories.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, IoContext, Result};
use crate::pipeline_step::{STEPS, data_count_keys};

/// File name of a step manifest.
pub const FILE: &str = "manifest.json";

/// Where `step`'s manifest lives: its row's `output_dir` in the step table
/// (`pipeline_step::STEPS`); a name with none, `<data_root>/<step>/manifest.json`.
pub fn manifest_path(data_root: &Path, step: &str) -> PathBuf {
    let dir = STEPS
        .iter()
        .find(|s| s.name == step)
        .and_then(|s| s.output_dir)
        .unwrap_or(step);
    data_root.join(dir).join(FILE)
}

/// Identity of one input file at the time a step read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFingerprint {
    pub path: PathBuf,
    pub size: u64,
    /// Modification time in nanoseconds since the Unix epoch (0 if before it).
    pub mtime_ns: u64,
    #[serde(default)]
    pub sha256: Option<String>,
}

impl InputFingerprint {
    /// Same content as `other`: equal sha256 when both have one, else equal size
    /// and mtime.
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

/// Size and mtime of `path` (no hash: cheap enough to call on every run).
pub fn fingerprint(path: &Path) -> Result<InputFingerprint> {
    let meta = std::fs::metadata(path).ctx("read metadata of", path)?;
    let mtime = meta.modified().ctx("read modification time of", path)?;
    let mtime_ns = mtime
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    Ok(InputFingerprint {
        path: path.to_path_buf(),
        size: meta.len(),
        mtime_ns,
        sha256: None,
    })
}

/// The manifest of one data step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepManifest {
    pub step: String,
    /// Version of the step's output format; a step bumps it to force a rebuild.
    pub version: u32,
    /// Hash of the config section the step depends on.
    pub config_hash: String,
    #[serde(default)]
    pub inputs: Vec<InputFingerprint>,
    /// Counts reported in the status (`documents`, `shard_count`, `tokens`, …).
    #[serde(default)]
    pub counts: BTreeMap<String, u64>,
    /// Output paths, relative to the step's directory.
    #[serde(default)]
    pub outputs: Vec<String>,
    /// RFC 3339 UTC time the step finished.
    pub finished_at: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl StepManifest {
    /// True when the step ran with `config_hash` on exactly these inputs (same
    /// set of paths, in any order, each unchanged), so its outputs can be reused.
    /// Pure: it does not look at the disk. Linear in the number of inputs (a step
    /// may read one input per shard, and there can be thousands).
    pub fn is_fresh(&self, inputs: &[InputFingerprint], config_hash: &str) -> bool {
        if self.config_hash != config_hash || self.inputs.len() != inputs.len() {
            return false;
        }
        let mut then: HashMap<&Path, &InputFingerprint> =
            self.inputs.iter().map(|f| (f.path.as_path(), f)).collect();
        // A path listed twice is not "the same set" as one listed once.
        if then.len() != self.inputs.len() {
            return false;
        }
        // Each path is taken once, so a repeated input cannot stand in for a missing one.
        inputs.iter().all(|now| {
            then.remove(now.path.as_path())
                .is_some_and(|then| then.matches(now))
        })
    }
}

/// Read `step`'s manifest: `Ok(None)` when the step has not finished (no
/// manifest), `Error::Empty`/`Error::Malformed` when the file is damaged.
pub fn read(data_root: &Path, step: &str) -> Result<Option<StepManifest>> {
    read_path(&manifest_path(data_root, step))
}

/// [`read`] of the manifest at `path` (a step's output kept in a directory of its
/// own, such as one mining of the hard examples).
pub fn read_path(path: &Path) -> Result<Option<StepManifest>> {
    let path = path.to_path_buf();
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read step manifest", &path, e)),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::Empty { path });
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::Malformed {
            reason: crate::heartbeat::json_reason(&e),
            path,
        })
}

/// Write `manifest` atomically to its step's path, creating the directory if
/// needed. Call it after every output is in place: its presence means "done".
pub fn write(data_root: &Path, manifest: &StepManifest) -> Result<()> {
    write_path(&manifest_path(data_root, &manifest.step), manifest)
}

/// [`write`] to `path`.
pub fn write_path(path: &Path, manifest: &StepManifest) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).ctx("create directory", dir)?;
    }
    crate::atomic::write_json(path, manifest)
}

/// The status `data` counts, from the step manifests alone (never lists a
/// directory). Every key is present; a count no readable manifest has is `None`.
pub fn data_counts(data_root: &Path) -> BTreeMap<String, Option<u64>> {
    // A damaged manifest reads as absent: status must still be produced.
    let manifests: BTreeMap<&str, StepManifest> = STEPS
        .iter()
        .filter(|s| s.output_dir.is_some())
        .filter_map(|s| Some((s.name, read(data_root, s.name).ok()??)))
        .collect();
    data_count_keys()
        .into_iter()
        .map(|key| {
            // The later step's figure wins (the documents left after filtering, not
            // those downloaded).
            let value = STEPS.iter().rev().find_map(|s| {
                let (_, count) = s.counts.iter().find(|(k, _)| *k == key)?;
                manifests.get(s.name)?.counts.get(*count).copied()
            });
            (key.to_string(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(step: &str, counts: &[(&str, u64)]) -> StepManifest {
        StepManifest {
            step: step.into(),
            version: 1,
            config_hash: "abc".into(),
            inputs: vec![],
            counts: counts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            outputs: vec!["shard-0000.bin".into()],
            finished_at: "2026-04-24T16:08:45Z".into(),
            extra: Map::new(),
        }
    }

    #[test]
    fn paths_follow_the_layout() {
        let root = Path::new("/d");
        let cases = [
            ("downloads", "/d/corpus/manifest.json"),
            ("dedup", "/d/corpus/dedup/manifest.json"),
            ("filter", "/d/corpus/filtered/manifest.json"),
            ("build_shards", "/d/shards/manifest.json"),
            ("precompute", "/d/tokens/manifest.json"),
            ("mine_hard", "/d/hard_examples/manifest.json"),
            ("custom", "/d/custom/manifest.json"),
        ];
        for (step, want) in cases {
            assert_eq!(manifest_path(root, step), Path::new(want), "{step}");
        }
    }

    #[test]
    fn write_read_round_trip_keeps_extra_fields() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = manifest("build_shards", &[("shard_count", 21), ("documents", 900)]);
        m.extra
            .insert("tokenizer".into(), serde_json::json!("bpe-8k"));
        write(dir.path(), &m).unwrap();
        assert!(dir.path().join("shards/manifest.json").is_file());
        assert_eq!(read(dir.path(), "build_shards").unwrap(), Some(m));
        assert_eq!(read(dir.path(), "precompute").unwrap(), None);
    }

    #[test]
    fn damaged_manifest_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = manifest_path(dir.path(), "precompute");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "").unwrap();
        assert!(matches!(
            read(dir.path(), "precompute"),
            Err(Error::Empty { .. })
        ));
        std::fs::write(&p, r#"{"step": "precompute", "vers"#).unwrap();
        assert!(matches!(
            read(dir.path(), "precompute"),
            Err(Error::Malformed { .. })
        ));
    }

    #[test]
    fn data_counts_from_manifests_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let counts = data_counts(root);
        assert_eq!(counts.len(), data_count_keys().len());
        assert!(counts.values().all(Option::is_none), "{counts:?}");

        write(
            root,
            &manifest(
                "downloads",
                &[("documents", 1000), ("bytes", 5), ("skipped_records", 3)],
            ),
        )
        .unwrap();
        write(root, &manifest("filter", &[("documents", 950)])).unwrap();
        write(
            root,
            &manifest("build_shards", &[("shard_count", 43), ("documents", 940)]),
        )
        .unwrap();
        write(
            root,
            &manifest(
                "precompute",
                &[
                    ("tokens", 123_456),
                    ("vocab_size", 8192),
                    ("shards_used", 21),
                ],
            ),
        )
        .unwrap();
        // A damaged manifest counts as absent rather than failing the status.
        let hard = manifest_path(root, "mine_hard");
        std::fs::create_dir_all(hard.parent().unwrap()).unwrap();
        std::fs::write(&hard, "{garbage").unwrap();

        let counts = data_counts(root);
        let get = |k: &str| counts[k];
        assert_eq!(get("shard_count"), Some(43));
        assert_eq!(get("documents"), Some(940));
        assert_eq!(get("tokens"), Some(123_456));
        assert_eq!(get("vocab_size"), Some(8192));
        assert_eq!(get("shards_used"), Some(21));
        assert_eq!(get("shards_available"), Some(43));
        assert_eq!(get("sft_samples"), None);
        assert_eq!(get("dpo_pairs"), None);
        assert_eq!(get("hard_examples"), None);
        assert_eq!(get("skipped_records"), Some(3));
    }

    #[test]
    fn freshness_over_many_inputs_checks_every_one() {
        let fp = |i: u64| InputFingerprint {
            path: PathBuf::from(format!("/d/shards/shard-{i:05}.jsonl")),
            size: i,
            mtime_ns: 1_000 + i,
            sha256: None,
        };
        let mut m = manifest("precompute", &[]);
        m.inputs = (0..20_000).map(fp).collect();
        let mut now: Vec<InputFingerprint> = (0..20_000).rev().map(fp).collect();
        assert!(m.is_fresh(&now, "abc"));
        now[12_345].mtime_ns += 1;
        assert!(!m.is_fresh(&now, "abc"));
        now[12_345] = fp(20_000);
        assert!(!m.is_fresh(&now, "abc"));
    }

    #[test]
    fn freshness() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.txt");
        let b = dir.path().join("b.txt");
        std::fs::write(&a, "hello").unwrap();
        std::fs::write(&b, "world!").unwrap();
        let fa = fingerprint(&a).unwrap();
        let fb = fingerprint(&b).unwrap();
        assert_eq!(fa.size, 5);
        assert!(fa.mtime_ns > 0);

        let mut m = manifest("dedup", &[]);
        m.inputs = vec![fa.clone(), fb.clone()];
        // Order of inputs does not matter.
        assert!(m.is_fresh(&[fb.clone(), fa.clone()], "abc"));
        assert!(!m.is_fresh(&[fa.clone(), fb.clone()], "other-config"));
        assert!(!m.is_fresh(std::slice::from_ref(&fa), "abc"));

        let grown = InputFingerprint {
            size: 6,
            ..fa.clone()
        };
        assert!(!m.is_fresh(&[grown, fb.clone()], "abc"));
        let touched = InputFingerprint {
            mtime_ns: fa.mtime_ns + 1,
            ..fa.clone()
        };
        assert!(!m.is_fresh(&[touched.clone(), fb.clone()], "abc"));

        // With hashes on both sides, content decides, not mtime.
        m.inputs[0].sha256 = Some("AA11".into());
        let touched_same = InputFingerprint {
            sha256: Some("aa11".into()),
            ..touched
        };
        assert!(m.is_fresh(&[touched_same, fb.clone()], "abc"));

        // The same count of inputs is not enough: a repeated path cannot stand in for
        // a missing one, on either side.
        assert!(!m.is_fresh(&[fa.clone(), fa.clone()], "abc"));
        let mut twice = m.clone();
        twice.inputs = vec![fa.clone(), fa.clone()];
        assert!(!twice.is_fresh(&[fa, fb], "abc"));

        let err = fingerprint(&dir.path().join("missing")).unwrap_err();
        assert!(err.is_not_found());
    }
}
