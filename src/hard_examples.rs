//! The hard examples `mine_hard` keeps: one directory per mining, never overwritten
//! nor deleted by lavender.
//!
//! `<data_root>/hard_examples/chunk<N>-<k>/` is the k-th mining of chunk N's training
//! windows (k counts from 1; a chunk run again is mined again into the next k). It
//! holds `windows.bin` (the windows, hardest first, each repeated `upsample` times),
//! `windows.json` (rank, shard, start, loss of each) and its `manifest.json`, whose
//! extra fields ([`Mined`]) say which chunk and window length they are from. The
//! directory is built under a hidden name and renamed into place complete.
//!
//! A run of chunk C mixes in, for every earlier chunk, that chunk's newest mining
//! ([`newest_before`]). `hard_examples/manifest.json` sums the minings up for the
//! status (`data.hard_examples`); each mining rewrites it, never a mining.
//!
//! A data root from before minings had directories of their own holds one mining at
//! the top (`hard_examples/windows.bin` beside a manifest naming its chunk): it counts
//! as mining 0 of that chunk until a new mining of any chunk moves it into
//! `chunk<N>-0/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::data_root::HARD_EXAMPLES;
use crate::error::{IoContext, Result};
use crate::manifest::{self, StepManifest};

/// The step's name, in its manifests and the pipeline.
pub const STEP: &str = "mine_hard";
/// The windows file of a mining.
pub const WINDOWS_FILE: &str = "windows.bin";
/// The list of a mining's windows (rank, shard, start, loss), for people and tools.
pub const LIST_FILE: &str = "windows.json";
/// The summary manifest's version (the per-chunk layout).
pub const SUMMARY_VERSION: u32 = 2;

/// `<data_root>/hard_examples/`.
pub fn dir(data_root: &Path) -> PathBuf {
    data_root.join(HARD_EXAMPLES)
}

/// What a mining's manifest records about its windows, and what a later chunk checks
/// before mixing them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mined {
    /// The chunk whose training windows were scored.
    pub chunk: u64,
    /// The windows are `seq_len + 1` tokens.
    pub seq_len: u64,
    /// How many times each window is repeated in `windows.bin`.
    pub upsample: u64,
}

impl Mined {
    /// The manifest's extra fields.
    pub fn to_extra(self) -> Map<String, Value> {
        Map::from_iter([
            ("chunk".to_string(), json!(self.chunk)),
            ("seq_len".to_string(), json!(self.seq_len)),
            ("upsample".to_string(), json!(self.upsample)),
        ])
    }

    /// Read back from a manifest; `None` when it lacks the chunk or the window length
    /// (`upsample` defaults to 1).
    pub fn from_manifest(m: &StepManifest) -> Option<Mined> {
        let field = |k: &str| m.extra.get(k).and_then(Value::as_u64);
        Some(Mined {
            chunk: field("chunk")?,
            seq_len: field("seq_len")?,
            upsample: field("upsample").unwrap_or(1),
        })
    }
}

/// One complete mining.
#[derive(Debug, Clone, PartialEq)]
pub struct Mining {
    /// Its directory (`hard_examples/` itself for the old top-level one).
    pub dir: PathBuf,
    /// The k of `chunk<N>-<k>`; 0 for the old top-level mining.
    pub ordinal: u64,
    pub mined: Mined,
    pub manifest: StepManifest,
}

impl Mining {
    pub fn windows(&self) -> PathBuf {
        self.dir.join(WINDOWS_FILE)
    }

    /// How it is named to people: `chunk1-2`, or `hard_examples` for the old one.
    pub fn name(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Windows kept (the manifest's `hard_examples` count).
    pub fn count(&self) -> u64 {
        self.manifest
            .counts
            .get("hard_examples")
            .copied()
            .unwrap_or(0)
    }
}

/// The directory name of mining `ordinal` of `chunk`.
pub fn mining_name(chunk: u64, ordinal: u64) -> String {
    format!("chunk{chunk}-{ordinal}")
}

/// `chunk3-2` → (3, 2); any other name → `None`.
fn parse_name(name: &str) -> Option<(u64, u64)> {
    let (chunk, ordinal) = name.strip_prefix("chunk")?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(chunk) || !digits(ordinal) {
        return None;
    }
    Some((chunk.parse().ok()?, ordinal.parse().ok()?))
}

/// The old top-level mining, when the data root still has one.
fn legacy(data_root: &Path) -> Result<Option<Mining>> {
    let top = dir(data_root);
    let Some(m) = manifest::read_path(&top.join(manifest::FILE))? else {
        return Ok(None);
    };
    let Some(mined) = Mined::from_manifest(&m) else {
        return Ok(None);
    };
    if !top.join(WINDOWS_FILE).is_file() {
        return Ok(None);
    }
    Ok(Some(Mining {
        dir: top,
        ordinal: 0,
        mined,
        manifest: m,
    }))
}

/// Every complete mining (a manifest that names its chunk and window length, and its
/// windows file), ordered by chunk, then ordinal. A damaged or partial mining is left
/// out, never an error: it cannot be mixed in, and the next mining goes past it.
pub fn list(data_root: &Path) -> Result<Vec<Mining>> {
    let top = dir(data_root);
    let entries = match std::fs::read_dir(&top) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(crate::Error::io("list", &top, e)),
    };
    let mut out: Vec<Mining> = legacy(data_root).ok().flatten().into_iter().collect();
    for entry in entries {
        let entry = entry.ctx("list", &top)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((chunk, ordinal)) = parse_name(&name) else {
            continue;
        };
        let path = entry.path();
        let Ok(Some(m)) = manifest::read_path(&path.join(manifest::FILE)) else {
            continue;
        };
        let Some(mined) = Mined::from_manifest(&m) else {
            continue;
        };
        if mined.chunk != chunk || !path.join(WINDOWS_FILE).is_file() {
            continue;
        }
        out.push(Mining {
            dir: path,
            ordinal,
            mined,
            manifest: m,
        });
    }
    out.sort_by_key(|m| (m.mined.chunk, m.ordinal));
    Ok(out)
}

/// For a run of `chunk`, the newest mining of each earlier chunk, earliest chunk first.
pub fn newest_before(minings: &[Mining], chunk: u64) -> Vec<&Mining> {
    let mut newest: BTreeMap<u64, &Mining> = BTreeMap::new();
    for m in minings.iter().filter(|m| m.mined.chunk < chunk) {
        newest.insert(m.mined.chunk, m); // sorted by ordinal: the last one wins
    }
    newest.into_values().collect()
}

/// Where the next mining of `chunk` goes: one past the highest ordinal of any
/// `chunk<N>-<k>` entry of that chunk, complete or not.
pub fn next_dir(data_root: &Path, chunk: u64) -> Result<PathBuf> {
    let top = dir(data_root);
    let mut highest = 0;
    match std::fs::read_dir(&top) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.ctx("list", &top)?;
                if let Some((c, k)) = parse_name(&entry.file_name().to_string_lossy())
                    && c == chunk
                {
                    highest = highest.max(k);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(crate::Error::io("list", &top, e)),
    }
    Ok(top.join(mining_name(chunk, highest + 1)))
}

/// Moves an old top-level mining into `chunk<N>-0/`, so the summary manifest can take
/// the top-level name. Its files are renamed, not rewritten.
pub fn move_legacy(data_root: &Path) -> Result<Option<PathBuf>> {
    let Some(old) = legacy(data_root)? else {
        return Ok(None);
    };
    let target = dir(data_root).join(mining_name(old.mined.chunk, 0));
    if target.exists() {
        return Ok(None);
    }
    std::fs::create_dir(&target).ctx("create directory", &target)?;
    for file in [WINDOWS_FILE, LIST_FILE] {
        let from = old.dir.join(file);
        if from.exists() {
            std::fs::rename(&from, target.join(file)).ctx("move", &from)?;
        }
    }
    // The manifest last: it is what makes the moved mining complete.
    manifest::write_path(&target.join(manifest::FILE), &old.manifest)?;
    let top_manifest = old.dir.join(manifest::FILE);
    std::fs::remove_file(&top_manifest).ctx("remove", &top_manifest)?;
    crate::atomic::sync_dir(&dir(data_root))?;
    Ok(Some(target))
}

/// The summary manifest (`hard_examples/manifest.json`): its `hard_examples` count is
/// the windows a run of a later chunk would mix in (the newest mining of every chunk).
pub fn summary(minings: &[Mining], finished_at: String) -> StepManifest {
    let newest = newest_before(minings, u64::MAX);
    let names: Vec<Value> = minings.iter().map(|m| json!(m.name())).collect();
    StepManifest {
        step: STEP.into(),
        version: SUMMARY_VERSION,
        config_hash: String::new(),
        inputs: Vec::new(),
        counts: BTreeMap::from([
            (
                "hard_examples".to_string(),
                newest.iter().map(|m| m.count()).sum(),
            ),
            ("minings".to_string(), minings.len() as u64),
        ]),
        outputs: minings.iter().map(Mining::name).collect(),
        finished_at,
        extra: Map::from_iter([("minings".to_string(), Value::Array(names))]),
    }
}

/// Writes the summary of the minings now on disk.
pub fn write_summary(data_root: &Path, finished_at: String) -> Result<()> {
    let minings = list(data_root)?;
    manifest::write(data_root, &summary(&minings, finished_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mined_manifest(chunk: u64, seq_len: u64, kept: u64) -> StepManifest {
        StepManifest {
            step: STEP.into(),
            version: 1,
            config_hash: "x".into(),
            inputs: vec![],
            counts: BTreeMap::from([("hard_examples".to_string(), kept)]),
            outputs: vec![WINDOWS_FILE.into()],
            finished_at: "2026-01-01T00:00:00Z".into(),
            extra: Mined {
                chunk,
                seq_len,
                upsample: 1,
            }
            .to_extra(),
        }
    }

    fn write_mining(root: &Path, name: &str, chunk: u64, kept: u64) -> PathBuf {
        let d = dir(root).join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(WINDOWS_FILE), name.as_bytes()).unwrap();
        manifest::write_path(&d.join(manifest::FILE), &mined_manifest(chunk, 16, kept)).unwrap();
        d
    }

    #[test]
    fn names_parse_and_only_complete_minings_are_listed() {
        assert_eq!(parse_name("chunk3-12"), Some((3, 12)));
        for bad in [
            "chunk3",
            "chunk-1",
            "chunkx-1",
            "chunk1-",
            ".tmp-chunk1-1",
            "manifest.json",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        assert!(list(root).unwrap().is_empty());
        write_mining(root, "chunk1-1", 1, 4);
        // No manifest yet: a mining in progress, or one that was killed.
        std::fs::create_dir_all(dir(root).join("chunk1-2")).unwrap();
        // A manifest naming another chunk than the directory is not trusted.
        write_mining(root, "chunk2-1", 3, 4);
        let names: Vec<String> = list(root).unwrap().iter().map(Mining::name).collect();
        assert_eq!(names, ["chunk1-1"]);
        // The next mining of chunk 1 goes past the partial one.
        assert_eq!(next_dir(root, 1).unwrap(), dir(root).join("chunk1-3"));
        assert_eq!(next_dir(root, 4).unwrap(), dir(root).join("chunk4-1"));
    }

    #[test]
    fn a_chunk_mixes_in_the_newest_mining_of_every_earlier_chunk() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write_mining(root, "chunk1-1", 1, 4);
        write_mining(root, "chunk1-2", 1, 5);
        write_mining(root, "chunk2-1", 2, 6);
        write_mining(root, "chunk3-1", 3, 7);
        let all = list(root).unwrap();
        let pick = |chunk| -> Vec<String> {
            newest_before(&all, chunk)
                .iter()
                .map(|m| m.name())
                .collect()
        };
        assert!(pick(1).is_empty());
        assert_eq!(pick(2), ["chunk1-2"]);
        assert_eq!(pick(3), ["chunk1-2", "chunk2-1"]);
        assert_eq!(pick(4), ["chunk1-2", "chunk2-1", "chunk3-1"]);
        let s = summary(&all, "t".into());
        assert_eq!(s.counts["hard_examples"], 5 + 6 + 7);
        assert_eq!(s.counts["minings"], 4);
        // The summary names no chunk: it is never read as a mining itself.
        assert_eq!(Mined::from_manifest(&s), None);
    }

    #[test]
    fn an_old_top_level_mining_counts_until_it_is_moved_into_its_own_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let top = dir(root);
        std::fs::create_dir_all(&top).unwrap();
        std::fs::write(top.join(WINDOWS_FILE), b"old windows").unwrap();
        std::fs::write(top.join(LIST_FILE), b"{}").unwrap();
        manifest::write(root, &mined_manifest(1, 16, 3)).unwrap();
        let all = list(root).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].ordinal, all[0].mined.chunk), (0, 1));
        assert_eq!(all[0].windows(), top.join(WINDOWS_FILE));

        let moved = move_legacy(root).unwrap().unwrap();
        assert_eq!(moved, top.join("chunk1-0"));
        assert_eq!(
            std::fs::read(moved.join(WINDOWS_FILE)).unwrap(),
            b"old windows"
        );
        assert!(!top.join(WINDOWS_FILE).exists());
        let all = list(root).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].dir, moved);
        assert_eq!(move_legacy(root).unwrap(), None);
        assert_eq!(next_dir(root, 1).unwrap(), top.join("chunk1-1"));
    }
}
