//! A checkpoint's content manifest: `manifest.json`, every file of the checkpoint
//! with its size and a content hash, written and fsynced before `trainer_state.json`
//! (which stays the commit marker). The manifest names its hash algorithm, so a
//! writer that has only SHA-256 (Python's standard library) and one that hashes with
//! BLAKE3 (`lavender-worker`) are read by the same verifier.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::untrusted;
use crate::atomic;
use crate::error::{Error, IoContext, Result};

/// The content manifest's file name inside a checkpoint directory.
pub const FILE: &str = "manifest.json";

/// What `format` says in every content manifest.
pub const FORMAT: &str = "lavender.checkpoint-manifest";

/// The manifest format's version this code writes and reads.
pub const VERSION: u32 = 1;

/// The hash a manifest's entries were made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HashAlgorithm {
    Blake3,
    Sha256,
}

impl HashAlgorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            HashAlgorithm::Blake3 => "blake3",
            HashAlgorithm::Sha256 => "sha256",
        }
    }

    pub fn hasher(self) -> ContentHasher {
        match self {
            HashAlgorithm::Blake3 => ContentHasher::Blake3(Box::default()),
            HashAlgorithm::Sha256 => ContentHasher::Sha256(Default::default()),
        }
    }
}

impl std::fmt::Display for HashAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An incremental hash of one file's bytes, fed as they are written (a writer needs
/// no second read) or as they are read back (the verifier).
pub enum ContentHasher {
    Blake3(Box<blake3::Hasher>),
    Sha256(sha2::Sha256),
}

impl ContentHasher {
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            ContentHasher::Blake3(h) => {
                h.update(bytes);
            }
            ContentHasher::Sha256(h) => sha2::Digest::update(h, bytes),
        }
    }

    /// The digest as lowercase hex.
    pub fn finish_hex(self) -> String {
        match self {
            ContentHasher::Blake3(h) => h.finalize().to_hex().to_string(),
            ContentHasher::Sha256(h) => hex(&sha2::Digest::finalize(h)),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One file of a checkpoint: its path relative to the checkpoint directory (with `/`
/// separators), its size in bytes and its hash as lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub path: String,
    pub size: u64,
    pub hash: String,
}

/// `manifest.json`: every file of the checkpoint but the manifest itself, the commit
/// marker `trainer_state.json` included (hashed from its bytes before they are
/// written: `cover`). A manifest that does not list the marker (written before it was
/// covered) verifies its files but leaves the checkpoint "unverified".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentManifest {
    pub format: String,
    pub version: u32,
    pub algorithm: HashAlgorithm,
    pub files: Vec<FileEntry>,
}

impl ContentManifest {
    pub fn new(algorithm: HashAlgorithm, mut files: Vec<FileEntry>) -> ContentManifest {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        ContentManifest {
            format: FORMAT.to_string(),
            version: VERSION,
            algorithm,
            files,
        }
    }

    /// The entry for `path` (relative, `/`-separated), if the manifest lists it.
    pub fn entry(&self, path: &str) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.path == path)
    }
}

/// Write `manifest` into the checkpoint directory `dir`, atomically and fsynced.
pub fn write(dir: &Path, manifest: &ContentManifest) -> Result<()> {
    atomic::write_json(&dir.join(FILE), manifest)
}

/// The manifest of the checkpoint at `dir`: `None` when it has none (a checkpoint
/// written before manifests, or by a writer without one); an error when the file is
/// there but unreadable or not a manifest this code understands.
pub fn read(dir: &Path) -> Result<Option<ContentManifest>> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", &path, e)),
    };
    parse(&bytes, path).map(Some)
}

/// `bytes` as a content manifest read from `path` (named in the error): the format
/// and version this code reads, every entry checked by [`check_entries`].
pub fn parse(bytes: &[u8], path: PathBuf) -> Result<ContentManifest> {
    let manifest: ContentManifest =
        serde_json::from_slice(bytes).map_err(|e| Error::Malformed {
            path: path.clone(),
            reason: format!("not a checkpoint content manifest: {e}"),
        })?;
    if manifest.format != FORMAT || manifest.version != VERSION {
        return Err(Error::Malformed {
            path,
            reason: format!(
                "format {:?} version {}; this lavender reads {FORMAT:?} version {VERSION}",
                manifest.format, manifest.version
            ),
        });
    }
    check_entries(&manifest.files).map_err(|reason| Error::Malformed { path, reason })?;
    Ok(manifest)
}

/// Every entry names a file inside the checkpoint, once: an absolute
/// path or `..` would have the check read (and vouch for) bytes that are not the
/// checkpoint's, and a restore write them outside it.
pub fn check_entries(files: &[FileEntry]) -> std::result::Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for entry in files {
        untrusted::entry_path(&entry.path).map_err(|why| {
            format!(
                "{:?} is not a path inside the checkpoint: {why} (a manifest lists relative paths without `..`)",
                entry.path
            )
        })?;
        if !seen.insert(entry.path.as_str()) {
            return Err(format!("entry {:?} is listed twice", entry.path));
        }
    }
    Ok(())
}

/// Take `path` out of the manifest of the checkpoint at `dir` (if it has one that
/// lists it), before that file is deleted from a committed checkpoint (the older
/// checkpoints' optimizer state under `save_optimizer_state: last`): a crash between
/// the two leaves a file the manifest does not name, never a listed one missing.
pub fn forget(dir: &Path, path: &str) -> Result<()> {
    let Some(mut manifest) = read(dir)? else {
        return Ok(());
    };
    let before = manifest.files.len();
    manifest.files.retain(|f| f.path != path);
    if manifest.files.len() == before {
        return Ok(());
    }
    write(dir, &manifest)
}

/// Lists `name` with `bytes` (a file about to be written into the checkpoint at
/// `dir`, its commit marker) in the checkpoint's manifest, when it has one; a
/// checkpoint without a manifest stays without.
pub fn cover(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let Some(mut manifest) = read(dir)? else {
        return Ok(());
    };
    let mut hasher = manifest.algorithm.hasher();
    hasher.update(bytes);
    let entry = FileEntry {
        path: name.to_string(),
        size: bytes.len() as u64,
        hash: hasher.finish_hex(),
    };
    manifest.files.retain(|f| f.path != name);
    manifest.files.push(entry);
    write(
        dir,
        &ContentManifest::new(manifest.algorithm, manifest.files),
    )
}

/// How a verifier reads and hashes one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hashing {
    /// Read in 1 MiB blocks on the calling thread: for a daemon beside training.
    OneThread,
    /// BLAKE3 from a memory map on every core (as `b3sum` does), SHA-256 as
    /// [`Hashing::OneThread`]: for a command whose only work this is. The file must
    /// not shrink while it is hashed (a map past its end faults), so not for a
    /// process that must survive that.
    AllCores,
}

/// Hash a file on disk: its size and digest, read in 1 MiB blocks.
pub fn hash_file(path: &Path, algorithm: HashAlgorithm) -> Result<(u64, String)> {
    hash_file_with(path, algorithm, Hashing::OneThread)
}

/// [`hash_file`], read and hashed as `hashing` says.
pub fn hash_file_with(
    path: &Path,
    algorithm: HashAlgorithm,
    hashing: Hashing,
) -> Result<(u64, String)> {
    if hashing == Hashing::AllCores && algorithm == HashAlgorithm::Blake3 {
        let mut hasher = blake3::Hasher::new();
        hasher
            .update_mmap_rayon(path)
            .map_err(|e| Error::io("read", path, e))?;
        return Ok((hasher.count(), hasher.finalize().to_hex().to_string()));
    }
    let mut file = File::open(path).ctx("open", path)?;
    let mut hasher = algorithm.hasher();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("read", path, e)),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hasher.finish_hex()))
}

/// What is wrong with one file of a checkpoint, against its manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum Damage {
    /// The manifest lists the file; the directory does not hold it.
    Missing { path: String },
    /// The file's size differs from the manifest's.
    Size {
        path: String,
        expected: u64,
        found: u64,
    },
    /// Same size, other bytes.
    Hash {
        path: String,
        expected: String,
        found: String,
    },
    /// The manifest is there but cannot be read or parsed, or lists no file at all
    /// (nothing of the checkpoint would be covered).
    Manifest { reason: String },
    /// A file in the checkpoint the manifest does not list (a leftover of a crash
    /// between a manifest rewrite and the file's removal, a file put there later): a
    /// loader that reads it would resume from bytes nothing vouches for.
    Unlisted { path: String },
    /// The file could not be read (a permission or I/O error).
    Unreadable { path: String, reason: String },
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::Missing { path } => write!(f, "{path}: missing"),
            Damage::Size {
                path,
                expected,
                found,
            } => write!(f, "{path}: {found} bytes, the manifest says {expected}"),
            Damage::Hash {
                path,
                expected,
                found,
            } => write!(
                f,
                "{path}: content hash {}…, the manifest says {}…",
                &found[..found.len().min(12)],
                &expected[..expected.len().min(12)]
            ),
            Damage::Manifest { reason } => write!(f, "{FILE}: {reason}"),
            Damage::Unlisted { path } => write!(f, "{path}: not listed in {FILE}"),
            Damage::Unreadable { path, reason } => write!(f, "{path}: unreadable: {reason}"),
        }
    }
}

/// The outcome of checking a checkpoint against its manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every file checked matches the manifest.
    Verified { files: usize, bytes: u64 },
    /// At least one file does not.
    Damaged { damage: Vec<Damage> },
    /// No manifest: nothing to check against.
    Unverified,
}

impl Verdict {
    pub fn is_damaged(&self) -> bool {
        matches!(self, Verdict::Damaged { .. })
    }

    /// A file (or the manifest) that could not be read at all (EIO, ESTALE, EACCES,
    /// ELOOP…): the storage failed, which says nothing of the checkpoint's bytes. Such
    /// a verdict is no damage to act on: nothing is set aside or recorded for it.
    pub fn storage_error(&self) -> Option<&Damage> {
        match self {
            Verdict::Damaged { damage } => damage
                .iter()
                .find(|d| matches!(d, Damage::Unreadable { .. })),
            _ => None,
        }
    }
}

/// How much of a checkpoint to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Sizes and every file's hash (re-reads every byte).
    Full,
    /// Sizes only: a `stat` per file (a torn or truncated file, a missing one).
    Sizes,
}

/// Check the checkpoint at `dir` against its manifest by re-reading the files (the
/// writer is not trusted). `only`, when given, limits the check to those relative
/// paths (the files a worker will load); the rest of the manifest is not read.
pub fn verify(dir: &Path, depth: Depth, only: Option<&[&str]>) -> Verdict {
    verify_with(dir, depth, only, Hashing::OneThread)
}

/// [`verify`], each file hashed as `hashing` says.
pub fn verify_with(dir: &Path, depth: Depth, only: Option<&[&str]>, hashing: Hashing) -> Verdict {
    let manifest = match read(dir) {
        Ok(Some(m)) => m,
        Ok(None) => return Verdict::Unverified,
        // The manifest's file could not be read: the storage's error, not damage.
        Err(Error::Io { source, .. }) => {
            return Verdict::Damaged {
                damage: vec![Damage::Unreadable {
                    path: FILE.into(),
                    reason: source.to_string(),
                }],
            };
        }
        Err(e) => {
            return Verdict::Damaged {
                damage: vec![Damage::Manifest {
                    reason: e.to_string(),
                }],
            };
        }
    };
    let mut damage = Vec::new();
    if manifest.files.is_empty() {
        damage.push(Damage::Manifest {
            reason: "lists no file: nothing of the checkpoint would be checked".into(),
        });
    }
    if only.is_none() {
        damage.extend(
            unlisted(dir, &manifest)
                .into_iter()
                .map(|path| Damage::Unlisted { path }),
        );
    }
    let mut files = 0;
    let mut bytes = 0;
    for entry in &manifest.files {
        if only.is_some_and(|only| !only.contains(&entry.path.as_str())) {
            continue;
        }
        files += 1;
        bytes += entry.size;
        if let Some(d) = check_file(dir, &manifest, entry, depth, hashing) {
            damage.push(d);
        }
    }
    if !damage.is_empty() {
        Verdict::Damaged { damage }
    } else if only.is_none() && manifest.entry(crate::trainer_state::FILE).is_none() {
        // Written before the commit marker was hashed into the manifest: every listed
        // file matches, but the step, the data cursor and the rest of the state a
        // resume reads are vouched for by nothing. Readable, as before; not verified.
        Verdict::Unverified
    } else {
        Verdict::Verified { files, bytes }
    }
}

/// The files under `dir` that `manifest` does not list (but the manifest itself and
/// `trainer_state.json`, which it never lists), as relative `/`-separated paths.
fn unlisted(dir: &Path, manifest: &ContentManifest) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                stack.push(path);
                continue;
            }
            let Ok(rel) = path.strip_prefix(dir) else {
                continue;
            };
            let rel = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            if rel != FILE && rel != crate::trainer_state::FILE && manifest.entry(&rel).is_none() {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

fn check_file(
    dir: &Path,
    manifest: &ContentManifest,
    entry: &FileEntry,
    depth: Depth,
    hashing: Hashing,
) -> Option<Damage> {
    let path: PathBuf = dir.join(&entry.path);
    let found = match std::fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Some(Damage::Missing {
                path: entry.path.clone(),
            });
        }
        Err(e) => {
            return Some(Damage::Unreadable {
                path: entry.path.clone(),
                reason: e.to_string(),
            });
        }
    };
    if found != entry.size {
        return Some(Damage::Size {
            path: entry.path.clone(),
            expected: entry.size,
            found,
        });
    }
    if depth == Depth::Sizes {
        return None;
    }
    match hash_file_with(&path, manifest.algorithm, hashing) {
        Ok((_, hash)) if hash == entry.hash => None,
        Ok((_, hash)) => Some(Damage::Hash {
            path: entry.path.clone(),
            expected: entry.hash.clone(),
            found: hash,
        }),
        Err(e) => Some(Damage::Unreadable {
            path: entry.path.clone(),
            reason: e.to_string(),
        }),
    }
}

/// Build a manifest by hashing the files now in `dir` (every regular file under it
/// but the manifest, `trainer_state.json` included when it is there). For writers that cannot hash as they
/// write; `lavender-worker` hashes the bytes it writes instead.
pub fn build_from_disk(dir: &Path, algorithm: HashAlgorithm) -> Result<ContentManifest> {
    let mut files = Vec::new();
    collect(dir, dir, algorithm, &mut files)?;
    Ok(ContentManifest::new(algorithm, files))
}

fn collect(
    root: &Path,
    dir: &Path,
    algorithm: HashAlgorithm,
    out: &mut Vec<FileEntry>,
) -> Result<()> {
    for entry in std::fs::read_dir(dir).ctx("list", dir)? {
        let entry = entry.ctx("list", dir)?;
        let path = entry.path();
        let kind = entry.file_type().ctx("stat", &path)?;
        if kind.is_dir() {
            collect(root, &path, algorithm, out)?;
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if rel == FILE {
            continue;
        }
        let (size, hash) = hash_file(&path, algorithm)?;
        out.push(FileEntry {
            path: rel,
            size,
            hash,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(algorithm: HashAlgorithm) -> (tempfile::TempDir, ContentManifest) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.safetensors"), vec![7u8; 4096]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/extra.bin"), b"abc").unwrap();
        std::fs::write(dir.path().join("trainer_state.json"), b"{}").unwrap();
        let m = build_from_disk(dir.path(), algorithm).unwrap();
        write(dir.path(), &m).unwrap();
        (dir, m)
    }

    #[test]
    fn known_digests() {
        let mut h = HashAlgorithm::Sha256.hasher();
        h.update(b"abc");
        assert_eq!(
            h.finish_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut h = HashAlgorithm::Blake3.hasher();
        h.update(b"abc");
        assert_eq!(
            h.finish_hex(),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
    }

    #[test]
    fn an_intact_checkpoint_verifies_with_either_algorithm() {
        for alg in [HashAlgorithm::Blake3, HashAlgorithm::Sha256] {
            let (dir, m) = checkpoint(alg);
            let paths: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
            assert_eq!(
                paths,
                ["model.safetensors", "sub/extra.bin", "trainer_state.json"]
            );
            assert_eq!(
                verify(dir.path(), Depth::Full, None),
                Verdict::Verified {
                    files: 3,
                    bytes: 4101
                }
            );
            assert_eq!(read(dir.path()).unwrap().unwrap(), m);
        }
    }

    #[test]
    fn every_core_hashes_to_the_same_digest() {
        let dir = tempfile::tempdir().unwrap();
        // Past blake3's threshold for a memory map (16 KiB), over several chunks.
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let path = dir.path().join("big.bin");
        std::fs::write(&path, &bytes).unwrap();
        for alg in [HashAlgorithm::Blake3, HashAlgorithm::Sha256] {
            assert_eq!(
                hash_file_with(&path, alg, Hashing::AllCores).unwrap(),
                hash_file(&path, alg).unwrap()
            );
        }
        assert_eq!(
            hash_file_with(&path, HashAlgorithm::Blake3, Hashing::AllCores)
                .unwrap()
                .1,
            blake3::hash(&bytes).to_hex().to_string()
        );
    }

    #[test]
    fn truncation_a_flipped_byte_and_a_missing_file_are_each_named() {
        let (dir, _) = checkpoint(HashAlgorithm::Blake3);
        let model = dir.path().join("model.safetensors");
        let mut bytes = std::fs::read(&model).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&model, &bytes).unwrap();
        let Verdict::Damaged { damage } = verify(dir.path(), Depth::Full, None) else {
            panic!("a flipped byte verified");
        };
        assert!(matches!(&damage[..], [Damage::Hash { path, .. }] if path == "model.safetensors"));
        // Sizes alone cannot see a flipped byte.
        assert!(!verify(dir.path(), Depth::Sizes, None).is_damaged());

        std::fs::write(&model, &bytes[..2048]).unwrap();
        let Verdict::Damaged { damage } = verify(dir.path(), Depth::Sizes, None) else {
            panic!("a truncated file verified");
        };
        assert_eq!(
            damage,
            [Damage::Size {
                path: "model.safetensors".into(),
                expected: 4096,
                found: 2048
            }]
        );

        std::fs::remove_file(dir.path().join("sub/extra.bin")).unwrap();
        // Limited to the files a worker loads, the missing extra is not looked at.
        let only = ["model.safetensors"];
        let Verdict::Damaged { damage } = verify(dir.path(), Depth::Full, Some(&only)) else {
            panic!("damaged weights verified");
        };
        assert_eq!(damage.len(), 1);
        let Verdict::Damaged { damage } = verify(dir.path(), Depth::Full, None) else {
            panic!();
        };
        assert!(damage.contains(&Damage::Missing {
            path: "sub/extra.bin".into()
        }));
    }

    /// The commit marker is covered: a step changed in `trainer_state.json` (the JSON
    /// still valid) is damage; a manifest written before the marker was covered
    /// verifies its files and leaves the checkpoint unverified, readable as before.
    #[test]
    fn the_commit_marker_is_covered_and_an_older_manifest_is_unverified() {
        let root = tempfile::tempdir().unwrap();
        let name: crate::checkpoint::CheckpointName = "pretrain-12-00-01-0001".parse().unwrap();
        let b = crate::checkpoint::CheckpointBuilder::begin(root.path(), &name).unwrap();
        std::fs::write(b.dir().join("model.safetensors"), vec![7u8; 64]).unwrap();
        write(
            b.dir(),
            &build_from_disk(b.dir(), HashAlgorithm::Blake3).unwrap(),
        )
        .unwrap();
        let dir = b
            .commit(&crate::trainer_state::TrainerState::new("pretrain", 1400))
            .unwrap();
        let m = read(&dir).unwrap().unwrap();
        assert!(m.entry(crate::trainer_state::FILE).is_some(), "{m:?}");
        assert!(matches!(
            verify(&dir, Depth::Full, None),
            Verdict::Verified { files: 2, .. }
        ));
        let state = dir.join(crate::trainer_state::FILE);
        let text = std::fs::read_to_string(&state).unwrap();
        std::fs::write(&state, text.replace("1400", "1401")).unwrap();
        let Verdict::Damaged { damage } = verify(&dir, Depth::Full, None) else {
            panic!("an altered step verified");
        };
        assert!(
            matches!(&damage[..], [Damage::Hash { path, .. }] if path == "trainer_state.json"),
            "{damage:?}"
        );
        // A manifest from before the marker was covered.
        std::fs::write(&state, text).unwrap();
        forget(&dir, crate::trainer_state::FILE).unwrap();
        assert_eq!(verify(&dir, Depth::Full, None), Verdict::Unverified);
        std::fs::write(dir.join("model.safetensors"), vec![8u8; 64]).unwrap();
        assert!(
            verify(&dir, Depth::Full, None).is_damaged(),
            "still checked"
        );
    }

    #[test]
    fn a_forgotten_file_may_go_and_the_rest_still_verifies() {
        let (dir, _) = checkpoint(HashAlgorithm::Blake3);
        forget(dir.path(), "sub/extra.bin").unwrap();
        std::fs::remove_file(dir.path().join("sub/extra.bin")).unwrap();
        assert_eq!(
            verify(dir.path(), Depth::Full, None),
            Verdict::Verified {
                files: 2,
                bytes: 4098
            }
        );
        // Twice, or without a manifest: nothing to do.
        forget(dir.path(), "sub/extra.bin").unwrap();
        std::fs::remove_file(dir.path().join(FILE)).unwrap();
        forget(dir.path(), "model.safetensors").unwrap();
        assert!(!dir.path().join(FILE).exists());
    }

    /// "Verified" covers every file a loader could read: a manifest listing nothing,
    /// or a file beside the listed ones (a leftover `optimizer.safetensors` from a
    /// crash between the manifest's rewrite and its removal), is not verified but
    /// damaged, naming what.
    #[test]
    fn an_empty_manifest_or_an_unlisted_file_is_not_verified() {
        let (dir, _) = checkpoint(HashAlgorithm::Blake3);
        assert!(matches!(
            verify(dir.path(), Depth::Full, None),
            Verdict::Verified { .. }
        ));
        std::fs::write(dir.path().join("optimizer.safetensors"), b"stale moments").unwrap();
        match verify(dir.path(), Depth::Full, None) {
            Verdict::Damaged { damage } => assert_eq!(
                damage,
                [Damage::Unlisted {
                    path: "optimizer.safetensors".into()
                }]
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Damage::Unlisted {
                path: "optimizer.safetensors".into()
            }
            .to_string(),
            "optimizer.safetensors: not listed in manifest.json"
        );
        // A check of named files only (what a worker loads) looks at those alone.
        assert!(matches!(
            verify(dir.path(), Depth::Full, Some(&["model.safetensors"])),
            Verdict::Verified { .. }
        ));
        let (dir, _) = checkpoint(HashAlgorithm::Blake3);
        write(
            dir.path(),
            &ContentManifest::new(HashAlgorithm::Blake3, Vec::new()),
        )
        .unwrap();
        for f in ["model.safetensors", "sub/extra.bin"] {
            std::fs::remove_file(dir.path().join(f)).unwrap();
        }
        match verify(dir.path(), Depth::Full, None) {
            Verdict::Damaged { damage } => assert!(
                matches!(&damage[..], [Damage::Manifest { reason }] if reason.contains("lists no file")),
                "{damage:?}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_manifest_is_unverified_and_a_broken_one_is_damage() {
        let (dir, _) = checkpoint(HashAlgorithm::Sha256);
        std::fs::write(dir.path().join(FILE), b"{\"format\": 3").unwrap();
        assert!(matches!(
            &verify(dir.path(), Depth::Full, None),
            Verdict::Damaged { damage } if matches!(damage[..], [Damage::Manifest { .. }])
        ));
        std::fs::remove_file(dir.path().join(FILE)).unwrap();
        assert_eq!(verify(dir.path(), Depth::Full, None), Verdict::Unverified);
    }

    #[test]
    fn a_manifest_naming_a_file_outside_the_checkpoint_is_damage() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("elsewhere.bin"), b"abc").unwrap();
        for bad in [
            "../elsewhere.bin".to_string(),
            "sub/../../elsewhere.bin".to_string(),
            outside.path().join("elsewhere.bin").display().to_string(),
        ] {
            let (dir, mut m) = checkpoint(HashAlgorithm::Sha256);
            // The entry's size and hash are those of the file it points at.
            m.files[1].path = bad.clone();
            write(dir.path(), &m).unwrap();
            match verify(dir.path(), Depth::Full, None) {
                Verdict::Damaged { damage } => match &damage[..] {
                    [Damage::Manifest { reason }] => {
                        assert!(
                            reason.contains("not a path inside the checkpoint"),
                            "{reason}"
                        );
                        assert!(reason.contains(&bad), "{reason}");
                    }
                    other => panic!("{bad}: {other:?}"),
                },
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    mod parse_properties {
        use super::super::*;
        use proptest::prelude::*;

        fn entry() -> impl Strategy<Value = serde_json::Value> {
            (
                "(\\.\\.|/|\\.|[a-z]{1,4}|\\\\){1,5}",
                any::<u64>(),
                "[0-9a-fA-F]{0,70}",
            )
                .prop_map(|(path, size, hash)| serde_json::json!({"path": path, "size": size, "hash": hash}))
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

            /// Any bytes: an error or a manifest; never a panic.
            #[test]
            fn any_bytes_parse_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                let _ = parse(&bytes, PathBuf::from("m.json"));
            }

            /// A well-formed document with arbitrary entries: accepted only when every
            /// entry joins below the checkpoint, once, with a digest.
            #[test]
            fn an_accepted_manifest_lists_only_paths_inside(files in proptest::collection::vec(entry(), 0..6)) {
                let doc = serde_json::json!({"format": FORMAT, "version": VERSION, "algorithm": "blake3", "files": files});
                let bytes = serde_json::to_vec(&doc).unwrap();
                if let Ok(m) = parse(&bytes, PathBuf::from("m.json")) {
                    let base = Path::new("/data/run/ckpt");
                    let mut seen = std::collections::BTreeSet::new();
                    for f in &m.files {
                        let joined = base.join(&f.path);
                        prop_assert!(joined.starts_with(base) && joined != base);
                        prop_assert!(!f.path.split('/').any(|c| c == ".." || c.is_empty()));
                        prop_assert!(seen.insert(f.path.clone()));
                    }
                }
            }
        }
    }
}
