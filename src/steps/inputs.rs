//! What a step's outputs depend on, fingerprinted for its done-marker: the values of
//! the config keys it reads (`PipelineStep::config_keys`), the identity of the step
//! outputs it reads (their manifests: format version, config hash, input
//! fingerprints, outputs and counts, not the time they were written), and for
//! training the hard examples it mixes in. At `start`, a finished step whose inputs
//! differ from its marker's runs again, with every step after it.
//!
//! Each part is a SHA-256 of its canonical JSON, kept by name, so `start` can say
//! which part changed. Paths inside the data root are taken relative to it, so a
//! moved data root changes nothing.
//!
//! The local files a step reads are parts too, one per file (`file PATH`, its
//! fingerprint: see `files.rs`): for `downloads`, the files of each
//! `data.sources[].path`, which has no upstream step to stand for them; for
//! `precompute`, `data.sft_jsonl`, `data.dpo_jsonl` and the files of
//! `model.init_from`. A file added, removed or changed is named by `start`. Markers
//! written before files were fingerprinted (no [`FILES_KEY`]) compare no files.
//! Fingerprinting reads files (a source folder may hold thousands), so the daemon does
//! it on the blocking pool ([`LocalFiles::read`]) and hands the result to the actor,
//! which compares and records ([`StepInputs::with_files`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{Config, DataSource, PipelineStep};
use crate::manifest::{self, StepManifest};
use crate::pipeline_file::sha256_hex;
use crate::pipeline_step::LocalFile;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A step's inputs: part name → SHA-256 of its value (`absent` when there is none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StepInputs(pub BTreeMap<String, String>);

const ABSENT: &str = "absent";

/// Present in the inputs of a step whose local files are parts (`file PATH`).
pub const FILES_KEY: &str = "files fingerprinted";
const FILE_PREFIX: &str = "file ";
/// At most this many files are named in one line; the rest are counted.
const FILES_NAMED: usize = 5;

/// The local files of the steps that read some, each with its fingerprint
/// (`files.rs`), as they were when read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalFiles(BTreeMap<PipelineStep, Vec<(PathBuf, String)>>);

impl LocalFiles {
    /// Fingerprints the local files of every step of `config` that reads some. This
    /// reads them (small ones whole): call it off the actor, on the blocking pool.
    pub fn read(config: &Config) -> LocalFiles {
        let steps = config.steps.iter().copied();
        LocalFiles::read_steps(steps, config)
    }

    /// [`LocalFiles::read`] for `steps` only.
    pub fn read_steps(
        steps: impl IntoIterator<Item = PipelineStep>,
        config: &Config,
    ) -> LocalFiles {
        let mut out = BTreeMap::new();
        for step in steps {
            if let Some(paths) = local_files(step, config) {
                let files = paths
                    .iter()
                    .flat_map(|p| super::files::fingerprints(p))
                    .collect();
                out.insert(step, files);
            }
        }
        LocalFiles(out)
    }
}

/// Whether `step` reads local files (whose fingerprints are part of its inputs).
pub fn reads_local_files(step: PipelineStep) -> bool {
    !step.spec().local_files.is_empty()
}

/// The local files `step` reads (its row's [`LocalFile`]s, resolved against `config`).
fn local_files(step: PipelineStep, config: &Config) -> Option<Vec<PathBuf>> {
    reads_local_files(step).then(|| {
        step.spec()
            .local_files
            .iter()
            .flat_map(|file| paths_of(*file, config))
            .collect()
    })
}

/// The paths `config` gives for `file`.
fn paths_of(file: LocalFile, config: &Config) -> Vec<PathBuf> {
    let one = |p: &Option<PathBuf>| p.iter().cloned().collect();
    match file {
        LocalFile::SourcePaths => config
            .data
            .sources
            .iter()
            .filter_map(|s| match s {
                DataSource::Path(p) => Some(p.path.clone()),
                _ => None,
            })
            .collect(),
        LocalFile::SftJsonl => one(&config.data.sft_jsonl),
        LocalFile::DpoJsonl => one(&config.data.dpo_jsonl),
        LocalFile::InitFrom => one(&config.model.init_from),
    }
}

fn hash_value(v: &Value) -> String {
    // serde_json's maps are ordered by key: equal values hash equally.
    sha256_hex(&serde_json::to_vec(v).expect("JSON values serialize"))
}

/// The value at a dotted `key` of the config (`<scale>` replaced by its scale).
fn config_value(tree: &Value, key: &str) -> Option<Value> {
    let scale = tree
        .get("scale")
        .and_then(Value::as_str)
        .unwrap_or_default();
    key.split('.')
        .map(|k| if k == "<scale>" { scale } else { k })
        .try_fold(tree, |v, k| v.get(k))
        .cloned()
}

/// What identifies a step's output: everything its manifest says about what it read
/// and made, with paths inside `data_root` made relative to it.
fn manifest_identity(m: &StepManifest, data_root: &Path) -> Value {
    let inputs: Vec<Value> = m
        .inputs
        .iter()
        .map(|f| {
            let path = f.path.strip_prefix(data_root).unwrap_or(&f.path);
            json!({"path": path, "size": f.size, "mtime_ns": f.mtime_ns, "sha256": f.sha256})
        })
        .collect();
    json!({
        "step": m.step,
        "version": m.version,
        "config_hash": m.config_hash,
        "inputs": inputs,
        "outputs": m.outputs,
        "counts": m.counts,
    })
}

impl StepInputs {
    /// `step`'s inputs now, for a run of `chunk` with `config` on `data_root`; reads
    /// its local files (see [`LocalFiles::read`]). The daemon reads them off the actor
    /// and calls [`StepInputs::with_files`].
    pub fn of(step: PipelineStep, config: &Config, data_root: &Path, chunk: u32) -> StepInputs {
        let files = LocalFiles::read_steps([step], config);
        StepInputs::with_files(step, config, data_root, chunk, &files)
    }

    /// [`StepInputs::of`] with its local files already fingerprinted (`files`, which
    /// holds them when the step reads any).
    pub fn with_files(
        step: PipelineStep,
        config: &Config,
        data_root: &Path,
        chunk: u32,
        files: &LocalFiles,
    ) -> StepInputs {
        let mut parts = BTreeMap::new();
        let tree = serde_json::to_value(config).unwrap_or(Value::Null);
        for key in step.config_keys() {
            let hash = config_value(&tree, key).map_or_else(|| ABSENT.into(), |v| hash_value(&v));
            parts.insert((*key).to_string(), hash);
        }
        for up in step.reads_outputs_of() {
            let hash = match manifest::read(data_root, up.as_str()) {
                Ok(Some(m)) => hash_value(&manifest_identity(&m, data_root)),
                Ok(None) => ABSENT.into(),
                // Unreadable now: surely not what the step read.
                Err(e) => format!("unreadable: {e}"),
            };
            parts.insert(format!("output of {up}"), hash);
        }
        if reads_local_files(step) {
            parts.insert(FILES_KEY.into(), "1".into());
            for (file, fp) in files.0.get(&step).into_iter().flatten() {
                let shown = file.strip_prefix(data_root).unwrap_or(file);
                parts.insert(format!("{FILE_PREFIX}{}", shown.display()), fp.clone());
            }
        }
        if step == PipelineStep::Train {
            let minings = crate::hard_examples::list(data_root).unwrap_or_default();
            for m in crate::hard_examples::newest_before(&minings, u64::from(chunk)) {
                parts.insert(
                    format!("hard examples of chunk {}", m.mined.chunk),
                    hash_value(&json!({
                        "mining": m.name(),
                        "manifest": manifest_identity(&m.manifest, data_root),
                    })),
                );
            }
        }
        StepInputs(parts)
    }

    /// One hash of all the parts.
    pub fn hash(&self) -> String {
        hash_value(&serde_json::to_value(&self.0).expect("strings serialize"))
    }

    /// What differs from `before`, one phrase each: `data.filter changed`,
    /// `/corpus/new.txt added`, `/corpus/old.txt removed`, `/corpus/a.txt changed`
    /// (files after the other parts, at most [`FILES_NAMED`] of them named, the rest
    /// counted). Files are compared only when `before` fingerprinted them.
    pub fn changed_since(&self, before: &StepInputs) -> Vec<String> {
        let files = before.0.contains_key(FILES_KEY);
        let mut parts = Vec::new();
        let mut changed_files = Vec::new();
        let mut note = |key: &str, how: &'static str| match key.strip_prefix(FILE_PREFIX) {
            Some(_) if !files => {}
            Some(path) => changed_files.push((path.to_string(), how)),
            None if key == FILES_KEY => {}
            None => parts.push(format!("{key} changed")),
        };
        for (key, value) in &self.0 {
            match before.0.get(key) {
                Some(old) if old == value => {}
                Some(_) => note(key, "changed"),
                None => note(key, "added"),
            }
        }
        for key in before.0.keys().filter(|k| !self.0.contains_key(*k)) {
            note(key, "removed");
        }
        parts.sort();
        changed_files.sort();
        let more = changed_files.len().saturating_sub(FILES_NAMED);
        changed_files.truncate(FILES_NAMED);
        parts.extend(
            changed_files
                .into_iter()
                .map(|(path, how)| format!("{path} {how}")),
        );
        if more > 0 {
            parts.push(format!("{more} more file(s)"));
        }
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_key_a_step_reads_changes_its_inputs_and_one_it_does_not_read_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let config = Config::default();
        let before = StepInputs::of(PipelineStep::Filter, &config, root, 1);
        let mut other = config.clone();
        other.training.log_every += 1;
        other.data.dedup.near_threshold = 0.5;
        assert_eq!(
            StepInputs::of(PipelineStep::Filter, &other, root, 1),
            before
        );
        let mut changed = config.clone();
        changed.data.filter.min_chars += 10;
        let after = StepInputs::of(PipelineStep::Filter, &changed, root, 1);
        assert_eq!(after.changed_since(&before), ["data.filter changed"]);
        assert_ne!(after.hash(), before.hash());
        // The scale's own preset counts for training; another scale's does not.
        let train = StepInputs::of(PipelineStep::Train, &config, root, 1);
        let mut big = config.clone();
        big.scales.large.total_steps += 1;
        assert_eq!(StepInputs::of(PipelineStep::Train, &big, root, 1), train);
        let mut tiny = config.clone();
        tiny.scales.tiny.total_steps += 1;
        assert_eq!(
            StepInputs::of(PipelineStep::Train, &tiny, root, 1).changed_since(&train),
            ["scales.<scale> changed"]
        );
    }

    #[test]
    fn an_upstream_output_that_changed_is_named_and_its_write_time_alone_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let config = Config::default();
        let mut m = StepManifest {
            step: "dedup".into(),
            version: 1,
            config_hash: "a".into(),
            inputs: vec![manifest::InputFingerprint {
                path: root.join("corpus/raw/a.txt"),
                size: 10,
                mtime_ns: 1,
                sha256: None,
            }],
            counts: BTreeMap::from([("documents".to_string(), 5)]),
            outputs: vec!["documents.jsonl".into()],
            finished_at: "2026-01-01T00:00:00Z".into(),
            extra: Default::default(),
        };
        let none = StepInputs::of(PipelineStep::Filter, &config, root, 1);
        manifest::write(root, &m).unwrap();
        let first = StepInputs::of(PipelineStep::Filter, &config, root, 1);
        assert_eq!(first.changed_since(&none), ["output of dedup changed"]);
        m.finished_at = "2026-02-02T00:00:00Z".into();
        m.extra.insert("selection".into(), json!([1]));
        manifest::write(root, &m).unwrap();
        assert_eq!(
            StepInputs::of(PipelineStep::Filter, &config, root, 1),
            first
        );
        m.counts.insert("documents".into(), 6);
        manifest::write(root, &m).unwrap();
        assert_eq!(
            StepInputs::of(PipelineStep::Filter, &config, root, 1).changed_since(&first),
            ["output of dedup changed"]
        );
    }

    fn downloads_of(root: &Path, corpus: &Path) -> StepInputs {
        let mut config = Config::default();
        config.data.sources = vec![DataSource::Path(crate::config::PathSource::text(corpus))];
        StepInputs::of(PipelineStep::Downloads, &config, root, 1)
    }

    #[test]
    fn a_source_file_added_removed_or_changed_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("data");
        let corpus = dir.path().join("corpus");
        std::fs::create_dir_all(&corpus).unwrap();
        std::fs::write(corpus.join("a.txt"), "alpha").unwrap();
        std::fs::write(corpus.join("b.txt"), "beta").unwrap();
        let first = downloads_of(&root, &corpus);
        assert!(
            downloads_of(&root, &corpus)
                .changed_since(&first)
                .is_empty()
        );
        std::fs::write(corpus.join("c.txt"), "gamma").unwrap();
        std::fs::write(corpus.join("a.txt"), "ALPHA").unwrap();
        std::fs::remove_file(corpus.join("b.txt")).unwrap();
        let shown = |name: &str| corpus.join(name).display().to_string();
        assert_eq!(
            downloads_of(&root, &corpus).changed_since(&first),
            [
                format!("{} changed", shown("a.txt")),
                format!("{} removed", shown("b.txt")),
                format!("{} added", shown("c.txt")),
            ]
        );
        // A marker from before files were fingerprinted compares none.
        let mut old = first.clone();
        old.0
            .retain(|k, _| !k.starts_with(FILE_PREFIX) && k != FILES_KEY);
        assert!(downloads_of(&root, &corpus).changed_since(&old).is_empty());
        // Many files: five named, the rest counted.
        for i in 0..8 {
            std::fs::write(corpus.join(format!("n{i}.txt")), format!("{i}")).unwrap();
        }
        let said = downloads_of(&root, &corpus).changed_since(&first);
        assert_eq!(said.len(), 6, "{said:?}");
        assert_eq!(said[5], "6 more file(s)");
    }
}
