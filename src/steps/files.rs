//! The local files a step reads, fingerprinted for its done-marker: the files each
//! `data.sources[].path` names (for `downloads`), and `data.sft_jsonl`,
//! `data.dpo_jsonl` and `model.init_from` (for `precompute`).
//!
//! Which files: a file names itself; a folder names every regular file under it,
//! recursively, hidden ones (`.name`) left out, whatever the source's format (a
//! superset of what `downloads` reads: a file of another format added to the folder
//! reruns it too, which costs a rerun, never a stale corpus); a glob names its matches
//! (folders among them as above). A path that names nothing has no files.
//!
//! The fingerprint of a file (the rule of DVC where it is cheap, of make where it is
//! not): a file under [`HASH_BELOW`] (1 MiB) is its size and the SHA-256 of its
//! content, so a `touch` alone or a copy that keeps the content changes nothing; a
//! larger file is its size, modification time, inode and status-change time
//! (`mtime_ns`, `ino`, `ctime_ns`), read with one `stat`, so a multi-gigabyte corpus
//! is never read at `start`. The inode and ctime are there because the mtime can be
//! set back (`cp -p`, `rsync -t`, `touch -r`): a same-size edit with its mtime
//! restored still moves the ctime (no user can set it) or, written beside and
//! renamed over, the inode.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Files smaller than this are fingerprinted by content.
pub const HASH_BELOW: u64 = 1 << 20;

/// The files `path` names (see the module's doc), sorted.
pub fn files_of(path: &Path) -> Vec<PathBuf> {
    let text = path.to_string_lossy();
    let mut out = Vec::new();
    if text.contains(['*', '?', '[']) {
        if let Ok(matches) = glob::glob(&text) {
            for m in matches.flatten() {
                add(&m, &mut out);
            }
        }
    } else {
        add(path, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

fn add(path: &Path, out: &mut Vec<PathBuf>) {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => walk(path, out),
        Ok(m) if m.is_file() => out.push(path.to_path_buf()),
        _ => {}
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        // file_type does not follow links; metadata does (a linked file or folder counts).
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&path, out),
            Ok(t) if t.is_file() => out.push(path),
            Ok(t) if t.is_symlink() => add(&path, out),
            _ => {}
        }
    }
}

/// The fingerprint of one file: `size=N sha256=HEX` under [`HASH_BELOW`], else
/// `size=N mtime_ns=T ino=I ctime_ns=C`; `unreadable: …` when it cannot be read.
pub fn fingerprint(path: &Path) -> String {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return format!("unreadable: {e}"),
    };
    let size = meta.len();
    if size < HASH_BELOW {
        return match sha256_file(path) {
            Ok(hex) => format!("size={size} sha256={hex}"),
            Err(e) => format!("unreadable: {e}"),
        };
    }
    let mtime_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let ino = meta.ino();
    let ctime_ns = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
    format!("size={size} mtime_ns={mtime_ns} ino={ino} ctime_ns={ctime_ns}")
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Each file `path` names with its fingerprint.
pub fn fingerprints(path: &Path) -> Vec<(PathBuf, String)> {
    files_of(path)
        .into_iter()
        .map(|f| {
            let fp = fingerprint(&f);
            (f, fp)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_names_its_files_recursively_and_small_files_are_judged_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus");
        std::fs::create_dir_all(corpus.join("sub")).unwrap();
        std::fs::write(corpus.join("a.txt"), "alpha").unwrap();
        std::fs::write(corpus.join("sub/b.txt"), "beta").unwrap();
        std::fs::write(corpus.join(".hidden"), "x").unwrap();
        assert_eq!(
            files_of(&corpus),
            [corpus.join("a.txt"), corpus.join("sub/b.txt")]
        );
        assert_eq!(files_of(&corpus.join("*.txt")), [corpus.join("a.txt")]);
        assert_eq!(files_of(&corpus.join("a.txt")), [corpus.join("a.txt")]);
        assert!(files_of(&dir.path().join("nothing")).is_empty());

        let before = fingerprint(&corpus.join("a.txt"));
        assert!(before.starts_with("size=5 sha256="), "{before}");
        // Touched (a new mtime, the same content): the same fingerprint.
        std::fs::File::options()
            .write(true)
            .open(corpus.join("a.txt"))
            .unwrap()
            .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60))
            .unwrap();
        assert_eq!(fingerprint(&corpus.join("a.txt")), before);
        std::fs::write(corpus.join("a.txt"), "alphA").unwrap();
        assert_ne!(fingerprint(&corpus.join("a.txt")), before);

        // A large file: size and mtime, its content never read.
        let big = corpus.join("big.bin");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(HASH_BELOW).unwrap();
        let fp = fingerprint(&big);
        assert!(
            fp.starts_with(&format!("size={HASH_BELOW} mtime_ns=")),
            "{fp}"
        );
    }

    /// The status-change time of `path` in nanoseconds.
    fn ctime_ns(path: &Path) -> i128 {
        let m = std::fs::metadata(path).unwrap();
        i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec())
    }

    /// Waits until the file system's clock has moved past `after` (its timestamps
    /// tick coarsely, every few milliseconds): a change made now gets a later ctime.
    fn until_ctime_passes(dir: &Path, after: i128) {
        let probe = dir.join(".probe");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            std::fs::write(&probe, "x").unwrap();
            if ctime_ns(&probe) > after {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the ctime never moved"
            );
            std::thread::yield_now();
        }
    }

    /// `cp -p` / `touch -r`: a large file rewritten in place with the same size, its
    /// mtime set back to what it was; and one replaced by a copy renamed over it with
    /// the old mtime (`rsync -t`).
    #[test]
    fn a_large_file_edited_with_its_mtime_restored_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.bin");
        std::fs::write(&big, vec![b'a'; HASH_BELOW as usize]).unwrap();
        let mtime = std::fs::metadata(&big).unwrap().modified().unwrap();
        let before = fingerprint(&big);
        until_ctime_passes(dir.path(), ctime_ns(&big));

        let f = std::fs::File::options().write(true).open(&big).unwrap();
        std::io::Write::write_all(&mut &f, b"b").unwrap();
        f.set_modified(mtime).unwrap();
        drop(f);
        assert_eq!(std::fs::metadata(&big).unwrap().modified().unwrap(), mtime);
        let edited = fingerprint(&big);
        assert_ne!(edited, before, "an in-place edit with the mtime restored");

        let copy = dir.path().join("copy.bin");
        std::fs::write(&copy, vec![b'c'; HASH_BELOW as usize]).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&copy)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        std::fs::rename(&copy, &big).unwrap();
        assert_ne!(fingerprint(&big), edited, "a copy renamed over it");
    }
}
