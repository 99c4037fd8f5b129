//! Reading a log that rotates while it is read (`lavenderd logs -f`), without losing
//! or repeating a line. The reader holds the file it reads open; the writer renames a
//! full file away before it begins the next one, so once the path names another file,
//! the held one is final: it is read to its end, then every file rotated after it (found
//! by identity among `<name>.1` … `<name>.<keep>`), oldest first, then the new file.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::rotating::rotated;

/// A file's identity, kept across renames.
type Identity = (u64, u64);

fn identity(f: &File) -> io::Result<Identity> {
    let m = f.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// Polls before the held file, gone from every rotated name, counts as rotated away
/// unread (a rename in flight can hide it for a moment).
const LOST_AFTER_POLLS: u32 = 3;

pub struct Follower {
    path: PathBuf,
    /// The writer's `logging.keep`: how far up the rotated names to look.
    keep: u32,
    file: File,
    id: Identity,
    missing_polls: u32,
}

impl Follower {
    /// Follows the log at `path` from byte `pos` of `file`, its current file (what
    /// was already shown is not shown again).
    pub fn at(path: &Path, mut file: File, pos: u64, keep: u32) -> io::Result<Follower> {
        file.seek(SeekFrom::Start(pos))?;
        Ok(Follower {
            id: identity(&file)?,
            path: path.to_path_buf(),
            keep,
            file,
            missing_polls: 0,
        })
    }

    /// Follows `path` from its start.
    pub fn from_start(path: &Path, keep: u32) -> io::Result<Follower> {
        let file = File::open(path)?;
        Ok(Follower {
            id: identity(&file)?,
            path: path.to_path_buf(),
            keep,
            file,
            missing_polls: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends to `out` everything written since the last poll, across rotations.
    pub fn poll(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        self.file.read_to_end(out)?;
        let current = match File::open(&self.path) {
            Ok(f) => f,
            // Between the rename and the new file: next time.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let current_id = identity(&current)?;
        if current_id == self.id {
            return Ok(());
        }
        // Rotated: the held file was renamed away before the new one began, so it is
        // final. What came after it is in newer rotated files, then in `current`.
        self.file.read_to_end(out)?;
        // The rotated files, newest first, each once. `current` is among them when it
        // was rotated in the meantime; whatever is newer than it (listed before it)
        // is for a later poll.
        let mut rotated_files: Vec<(File, Identity)> = Vec::new();
        let mut k = 1;
        loop {
            let name = rotated(&self.path, k);
            match File::open(&name) {
                Ok(f) => {
                    let id = identity(&f)?;
                    // A file can move up a name while this looks: take each once.
                    if !rotated_files.iter().any(|(_, seen)| *seen == id) {
                        rotated_files.push((f, id));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && k > self.keep + 1 => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            k += 1;
        }
        // Names read while the log rotated again can be out of order (a file that moved
        // up two names is seen after an older one): the scan counts only if the path
        // still names `current`; else the next poll scans again.
        match File::open(&self.path).and_then(|f| identity(&f)) {
            Ok(id) if id == current_id => {}
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        let older_than_current = rotated_files
            .iter()
            .position(|(_, id)| *id == current_id)
            .map_or(0, |at| at + 1);
        let between: Vec<(File, Identity)> = rotated_files.drain(older_than_current..).collect();
        // Between `current` and the held file: what was written after the held one.
        let newer: Vec<File> = match between.iter().position(|(_, id)| *id == self.id) {
            Some(at) => between.into_iter().take(at).rev().map(|(f, _)| f).collect(),
            None if self.missing_polls < LOST_AFTER_POLLS => {
                self.missing_polls += 1;
                return Ok(());
            }
            None => {
                out.extend_from_slice(
                    format!(
                        "lavenderd logs: the log rotated past the {} kept file(s) before it could be read; lines are missing here\n",
                        self.keep
                    )
                    .as_bytes(),
                );
                between.into_iter().rev().map(|(f, _)| f).collect()
            }
        };
        self.missing_polls = 0;
        for mut f in newer {
            f.read_to_end(out)?;
        }
        self.file = current;
        self.id = current_id;
        self.file.read_to_end(out)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::rotating::RotatingFile;
    use lavender::config::LoggingConfig;
    use std::time::Duration;

    /// A writer rotating every few dozen lines while a reader polls: every line
    /// arrives once, in order, however many rotations fall between two polls (enough
    /// files are kept that none is deleted unread: that case is the next test's).
    #[test]
    fn following_across_rotations_loses_and_repeats_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        let limits = LoggingConfig {
            max_bytes: 1024,
            keep: 200,
        };
        let mut log = RotatingFile::open(&path, limits).unwrap();
        log.append(b"before\n").unwrap();
        let file = File::open(&path).unwrap();
        let end = file.metadata().unwrap().len();
        let mut follower = Follower::at(&path, file, end, limits.keep).unwrap();
        let n = 5000;
        let writer = std::thread::spawn(move || {
            for i in 0..n {
                log.append(format!("line {i:05} of the pipeline log\n").as_bytes())
                    .unwrap();
                if i % 50 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        let mut out = Vec::new();
        while !writer.is_finished() {
            follower.poll(&mut out).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        writer.join().unwrap();
        follower.poll(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let want: String = (0..n)
            .map(|i| format!("line {i:05} of the pipeline log\n"))
            .collect();
        assert!(path.with_extension("log.3").exists(), "it rotated");
        let (got, want): (Vec<&str>, Vec<&str>) = (text.lines().collect(), want.lines().collect());
        let first_difference = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            first_difference.is_none() && got.len() == want.len(),
            "{} lines of {}; first difference at {first_difference:?}: {:?}",
            got.len(),
            want.len(),
            first_difference.map(|i| {
                let again = got.iter().rposition(|l| *l == want[i]).unwrap_or(0);
                (
                    got[i.saturating_sub(2)..(i + 3).min(got.len())].to_vec(),
                    again,
                    got[again.saturating_sub(3)..(again + 3).min(got.len())].to_vec(),
                )
            })
        );
    }

    #[test]
    fn a_reader_left_behind_more_than_keep_rotations_says_lines_are_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        let limits = LoggingConfig {
            max_bytes: 1024,
            keep: 1,
        };
        let mut log = RotatingFile::open(&path, limits).unwrap();
        let mut follower = Follower::from_start(&path, limits.keep).unwrap();
        for i in 0..300 {
            log.append(format!("line {i:05}\n").as_bytes()).unwrap();
        }
        let mut out = Vec::new();
        for _ in 0..=LOST_AFTER_POLLS {
            follower.poll(&mut out).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("lines are missing here"), "{text}");
        assert!(text.ends_with("line 00299\n"), "{text}");
    }
}
