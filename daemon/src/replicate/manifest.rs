//! The remote manifest: what a replicated checkpoint holds (every object's size and
//! hash, in the checkpoint's own hash algorithm) and what it is (run, stage, step,
//! validation loss, when it was completed). Written last; its presence is the remote
//! commit marker.

use lavender::checkpoint::contents::{self, FileEntry, HashAlgorithm};
use lavender::checkpoint::untrusted;
use lavender::trainer_state;
use serde::{Deserialize, Serialize};

/// The remote manifest's object name inside the checkpoint's remote folder.
pub const FILE: &str = "lavender-remote.json";
/// What `format` says.
pub const FORMAT: &str = "lavender.remote-checkpoint";
/// The version this code writes and reads.
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteManifest {
    pub format: String,
    pub version: u32,
    pub run: String,
    pub checkpoint: String,
    pub stage: String,
    pub step: u64,
    pub val_loss: Option<f64>,
    /// When the local checkpoint became complete (its `trainer_state.json`'s mtime),
    /// in ms since the epoch: a restored copy gets it back, so it sorts as it did.
    pub completed_unix_ms: u64,
    pub uploaded_at: String,
    pub algorithm: HashAlgorithm,
    /// Every object of the checkpoint but this manifest, paths relative to its folder.
    pub files: Vec<FileEntry>,
    /// The run-level files a resume of it reads (`lavender::run::RUN_FILES` that the
    /// run folder held at the upload), each stored once by content at
    /// `<run>/`[`RUN_FILES_DIR`]`/<hash>/<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_files: Vec<FileEntry>,
    /// The training these copies belong to (`replicate.lineage`, else the name of the
    /// run it started with); absent in copies written before lineages were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<String>,
    /// `blake3-keyed:<hex>`: a MAC over everything above, with the key of
    /// `replicate.signing_key_file` (`super::signing`); absent when none is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// The remote folder of each run holding its run-level files, by content.
pub const RUN_FILES_DIR: &str = "_run";

/// The latest completion time accepted (the end of year 9999, in ms).
const LATEST_MS: u64 = 253_402_300_799_000;

impl RemoteManifest {
    /// What the remote manifest of the local checkpoint `c` of `run` says of it
    /// (name, stage, step, loss, completion time); its files, hashes and upload time
    /// are the upload's to fill in.
    pub fn describe(run: &str, c: &lavender::checkpoint::Checkpoint) -> RemoteManifest {
        RemoteManifest {
            format: FORMAT.into(),
            version: VERSION,
            run: run.to_string(),
            checkpoint: c.name.clone(),
            stage: c.state.stage.clone(),
            step: c.state.step,
            val_loss: c.state.val_loss,
            completed_unix_ms: c
                .mtime
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            uploaded_at: String::new(),
            algorithm: HashAlgorithm::Blake3,
            files: Vec::new(),
            run_files: Vec::new(),
            lineage: None,
            signature: None,
        }
    }

    /// The lineage this copy belongs to: the one it names, else its run's name.
    pub fn lineage_name(&self) -> &str {
        self.lineage.as_deref().unwrap_or(&self.run)
    }

    /// The bytes a restore downloads: the checkpoint's and its run files'.
    pub fn download_bytes(&self) -> u64 {
        self.run_files
            .iter()
            .fold(self.bytes(), |a, f| a.saturating_add(f.size))
    }

    /// The bytes of every object; the manifests [`RemoteManifest::parse`] accepts
    /// cannot overflow it.
    pub fn bytes(&self) -> u64 {
        self.files
            .iter()
            .fold(0u64, |a, f| a.saturating_add(f.size))
    }

    /// Parses `bytes`, the object `what` listed under `<run>/<checkpoint>/`: the
    /// format and version this code reads, then [`RemoteManifest::check`] against
    /// that key. Everything in it came from the bucket: nothing is trusted before this.
    pub fn parse(
        bytes: &[u8],
        what: &str,
        run: &str,
        checkpoint: &str,
    ) -> Result<RemoteManifest, String> {
        let m: RemoteManifest = serde_json::from_slice(bytes)
            .map_err(|e| format!("{what}: not a remote checkpoint manifest: {e}"))?;
        if m.format != FORMAT || m.version != VERSION {
            return Err(format!(
                "{what}: format {:?} version {}; this lavenderd reads {FORMAT:?} version {VERSION}",
                m.format, m.version
            ));
        }
        m.check(run, checkpoint)
            .map_err(|why| format!("{what}: refused: {why}"))?;
        Ok(m)
    }

    /// Whether this manifest may be acted on as the checkpoint `run/checkpoint`: its
    /// names are the key's and names lavender writes (one path component each); each
    /// entry a relative path inside the checkpoint, once, with a digest, never this
    /// manifest's own name; `trainer_state.json` and `manifest.json` among them; the
    /// sizes summing without overflow; the stage a short printable word.
    pub fn check(&self, run: &str, checkpoint: &str) -> Result<(), String> {
        untrusted::run_name(&self.run)?;
        untrusted::checkpoint_name(&self.checkpoint)?;
        if (self.run.as_str(), self.checkpoint.as_str()) != (run, checkpoint) {
            return Err(format!(
                "it names {}/{} but is listed under {run}/{checkpoint}",
                self.run, self.checkpoint
            ));
        }
        contents::check_entries(&self.files)?;
        for f in &self.files {
            untrusted::digest_hex(&f.hash).map_err(|why| format!("entry {:?}: {why}", f.path))?;
        }
        if self.files.iter().any(|f| f.path == FILE) {
            return Err(format!(
                "an entry is named {FILE}, the remote manifest's own name"
            ));
        }
        for needed in [trainer_state::FILE, contents::FILE] {
            if !self.files.iter().any(|f| f.path == needed) {
                return Err(format!("it lists no {needed}"));
            }
        }
        if let Some(l) = &self.lineage
            && !lavender::config::valid_lineage(l)
        {
            return Err(format!("lineage {l:?} is not a lineage name"));
        }
        contents::check_entries(&self.run_files)?;
        for f in &self.run_files {
            if !lavender::run::RUN_FILES.contains(&f.path.as_str()) {
                return Err(format!(
                    "run file {:?} is not one a resume reads ({})",
                    f.path,
                    lavender::run::RUN_FILES.join(", ")
                ));
            }
            untrusted::digest_hex(&f.hash)
                .map_err(|why| format!("run file {:?}: {why}", f.path))?;
        }
        if self
            .files
            .iter()
            .chain(&self.run_files)
            .try_fold(0u64, |a, f| a.checked_add(f.size))
            .is_none()
        {
            return Err("its sizes add up past 2^64 bytes".into());
        }
        if self.stage.is_empty()
            || self.stage.len() > 64
            || self.stage.chars().any(char::is_control)
        {
            return Err(format!("stage {:?} is not a stage name", self.stage));
        }
        if self.completed_unix_ms > LATEST_MS {
            return Err(format!(
                "completed_unix_ms {} is past the year 9999",
                self.completed_unix_ms
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;

    const RUN: &str = "run-2026-04-24_16-08-45";
    const CKPT: &str = "pretrain-16-08-47-0003";

    pub(crate) fn manifest(files: &[&str]) -> RemoteManifest {
        RemoteManifest {
            format: FORMAT.into(),
            version: VERSION,
            run: RUN.into(),
            checkpoint: CKPT.into(),
            stage: "pretrain".into(),
            step: 20,
            val_loss: Some(2.5),
            completed_unix_ms: 1_777_000_000_000,
            uploaded_at: "2026-04-24T16:08:48.000Z".into(),
            algorithm: HashAlgorithm::Blake3,
            files: files
                .iter()
                .map(|p| FileEntry {
                    path: p.to_string(),
                    size: 3,
                    hash: "ab".repeat(32),
                })
                .collect(),
            run_files: Vec::new(),
            lineage: None,
            signature: None,
        }
    }

    fn parsed(m: &RemoteManifest) -> Result<RemoteManifest, String> {
        RemoteManifest::parse(&serde_json::to_vec(m).unwrap(), "k", RUN, CKPT)
    }

    #[test]
    fn what_lavender_writes_parses() {
        let m = manifest(&["model.safetensors", "trainer_state.json", "manifest.json"]);
        assert_eq!(parsed(&m), Ok(m));
    }

    #[test]
    fn a_manifest_that_would_leave_its_checkpoint_is_refused_naming_why() {
        let base = ["trainer_state.json", "manifest.json"];
        let with = |p: &'static str| {
            let mut all = base.to_vec();
            all.push(p);
            manifest(&all)
        };
        let mut cases: Vec<(RemoteManifest, &str)> = vec![
            (with("/home/u/.bashrc"), "absolute"),
            (with("../../outside"), "`..`"),
            (with("sub/../../x"), "`..`"),
            (with(FILE), "the remote manifest's own name"),
            (with("model.safetensors/"), "empty component"),
            (
                manifest(&["model.safetensors", "manifest.json"]),
                "no trainer_state.json",
            ),
        ];
        for (field, value, says) in [
            ("run", "/home/u", "not a run name"),
            ("run", "..", "not a run name"),
            ("checkpoint", "..", "not a checkpoint name"),
            ("checkpoint", "a/b", "not a checkpoint name"),
            ("run", "run-2026-04-24_16-08-46", "listed under"),
            ("checkpoint", "pretrain-16-08-47-0004", "listed under"),
        ] {
            let mut m = manifest(&base);
            match field {
                "run" => m.run = value.into(),
                _ => m.checkpoint = value.into(),
            }
            cases.push((m, says));
        }
        let mut m = manifest(&base);
        m.files[0].size = u64::MAX;
        cases.push((m, "past 2^64"));
        let mut m = manifest(&base);
        m.files.push(m.files[0].clone());
        cases.push((m, "listed twice"));
        for (path, says) in [
            ("../lineage.json", "`..`"),
            ("notes.txt", "not one a resume reads"),
        ] {
            let mut m = manifest(&base);
            m.run_files.push(FileEntry {
                path: path.into(),
                size: 1,
                hash: "ab".repeat(32),
            });
            cases.push((m, says));
        }
        let mut m = manifest(&base);
        m.files[0].hash = "../../x".into();
        cases.push((m, "64 lowercase hex"));
        let mut m = manifest(&base);
        m.stage = "a\nb".into();
        cases.push((m, "not a stage name"));
        for (m, says) in cases {
            let e = parsed(&m).unwrap_err();
            assert!(e.contains("refused") && e.contains(says), "{says}: {e}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever names and paths the bucket holds, an accepted manifest builds
        /// local paths strictly inside `<root>/<run>/<checkpoint>/` only.
        #[test]
        fn an_accepted_manifest_builds_paths_inside_its_checkpoint(
            run in prop_oneof![Just(RUN.to_string()), "(\\.\\.|/|run-|[0-9-_]{1,4}|[a-z]{1,3}){0,5}"],
            ckpt in prop_oneof![Just(CKPT.to_string()), "(\\.\\.|/|checkpoint-|[0-9]{1,3}|[a-z-]{1,4}){0,5}"],
            paths in proptest::collection::vec("(\\.\\.|/|\\.|[a-z]{1,4}|\\\\|\\x00){1,6}", 0..4),
            sizes in proptest::collection::vec(any::<u64>(), 4),
        ) {
            let mut m = manifest(&["trainer_state.json", "manifest.json"]);
            m.run = run.clone();
            m.checkpoint = ckpt.clone();
            for (p, size) in paths.iter().zip(&sizes) {
                m.files.push(FileEntry { path: p.clone(), size: *size, hash: "cd".repeat(32) });
            }
            let bytes = serde_json::to_vec(&m).unwrap();
            if let Ok(m) = RemoteManifest::parse(&bytes, "k", &run, &ckpt) {
                let root = Path::new("/data/checkpoints");
                let dest = root.join(&m.run).join(&m.checkpoint);
                prop_assert_eq!(dest.parent().and_then(Path::parent), Some(root));
                for f in &m.files {
                    let p = dest.join(&f.path);
                    prop_assert!(p.starts_with(&dest) && p != dest, "{:?}", f.path);
                    prop_assert!(!f.path.split('/').any(|c| c == ".." || c == "." || c.is_empty()));
                }
                prop_assert!(m.files.iter().try_fold(0u64, |a, f| a.checked_add(f.size)).is_some());
            }
        }

        /// Any bytes: refused or parsed, never a panic.
        #[test]
        fn any_bytes_parse_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = RemoteManifest::parse(&bytes, "k", RUN, CKPT);
        }
    }
}
