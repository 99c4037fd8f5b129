//! A log file that rotates by size (`logging.max_bytes`, `logging.keep`): when what
//! comes next would take it past `max_bytes`, `<name>.<keep-1>` … `<name>.1` move up
//! one (the oldest is dropped), the file becomes `<name>.1`, and a new one is begun.
//! Lines stay whole: a rotation happens only between two lines, so a file may pass
//! `max_bytes` by the rest of the line being written when it got there, and a single
//! line longer than `max_bytes` goes into a file of its own. The renames are the whole protocol
//! a reader needs ([`super::follow`]): a file renamed away is never written again.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use lavender::config::LoggingConfig;

/// `<path>.<k>`: the k-th newest rotated file of the log at `path`.
pub fn rotated(path: &Path, k: u32) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{k}"));
    PathBuf::from(name)
}

pub struct RotatingFile {
    path: PathBuf,
    file: File,
    len: u64,
    /// The last byte written ended a line (or nothing is written yet).
    at_line_start: bool,
    limits: LoggingConfig,
    /// Called with the new file after each rotation (the daemon points its own
    /// stdout and stderr at it).
    on_rotate: Option<OnRotate>,
}

/// What a rotation calls with the new file.
type OnRotate = Box<dyn Fn(&File) + Send>;

impl RotatingFile {
    /// Opens `path` for appending (creating it and its directory), continuing a log
    /// that is already there.
    pub fn open(path: &Path, limits: LoggingConfig) -> io::Result<RotatingFile> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            file,
            len,
            at_line_start: true,
            limits,
            on_rotate: None,
        })
    }

    pub fn on_rotate(mut self, f: impl Fn(&File) + Send + 'static) -> RotatingFile {
        self.on_rotate = Some(Box::new(f));
        self
    }

    /// New limits (a config reload) apply from the next write.
    pub fn set_limits(&mut self, limits: LoggingConfig) {
        self.limits = limits;
    }

    /// Appends `buf`, rotating between lines when the file would grow past the limit.
    pub fn append(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            if !self.at_line_start {
                // Finish the line begun in this file.
                let end = buf
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(buf.len(), |i| i + 1);
                self.put(&buf[..end])?;
                buf = &buf[end..];
                continue;
            }
            let room = self.limits.max_bytes.saturating_sub(self.len) as usize;
            // The whole lines that still fit, or else the first line alone.
            let fits = if buf.len() <= room {
                buf.len()
            } else {
                buf[..room]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1)
            };
            if fits > 0 {
                self.put(&buf[..fits])?;
                buf = &buf[fits..];
                continue;
            }
            if self.len > 0 {
                self.rotate()?;
                continue;
            }
            let end = buf
                .iter()
                .position(|&b| b == b'\n')
                .map_or(buf.len(), |i| i + 1);
            self.put(&buf[..end])?;
            buf = &buf[end..];
        }
        Ok(())
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        self.at_line_start = bytes.ends_with(b"\n");
        Ok(())
    }

    /// `.keep-1` … `.1` up one, the file to `.1`, a new file at the path.
    fn rotate(&mut self) -> io::Result<()> {
        let keep = self.limits.keep.max(1);
        for k in (1..keep).rev() {
            match std::fs::rename(rotated(&self.path, k), rotated(&self.path, k + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1))?;
        // Older files beyond a lowered `keep` go too.
        let mut k = keep + 1;
        while std::fs::remove_file(rotated(&self.path, k)).is_ok() {
            k += 1;
        }
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.len = 0;
        self.at_line_start = true;
        if let Some(f) = &self.on_rotate {
            f(&self.file);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_bytes: u64, keep: u32) -> LoggingConfig {
        LoggingConfig { max_bytes, keep }
    }

    /// The log's files, oldest first, as text.
    fn files_oldest_first(path: &Path, keep: u32) -> Vec<String> {
        let mut out: Vec<String> = (1..=keep)
            .rev()
            .filter_map(|k| std::fs::read_to_string(rotated(path, k)).ok())
            .collect();
        out.push(std::fs::read_to_string(path).unwrap_or_default());
        out
    }

    #[test]
    fn rotates_between_lines_keeps_keep_files_and_loses_no_line_of_what_it_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/p.log");
        let mut log = RotatingFile::open(&path, limits(100, 3)).unwrap();
        let lines: Vec<String> = (0..200).map(|i| format!("line {i:04}\n")).collect();
        // Written in pieces that split lines, as a pipe delivers them.
        let all = lines.concat();
        for piece in all.as_bytes().chunks(7) {
            log.append(piece).unwrap();
        }
        let files = files_oldest_first(&path, 3);
        assert_eq!(files.len(), 4);
        assert!(!rotated(&path, 4).exists(), "keep 3 rotated files");
        for f in &files {
            // A line begun in a file is finished there: at most one line past the limit.
            assert!(f.len() <= 100 + 10, "{} bytes", f.len());
            assert!(f.ends_with('\n') || f.is_empty(), "whole lines: {f:?}");
        }
        // The files hold the newest lines, in order, each once.
        let kept: String = files.concat();
        assert!(all.ends_with(&kept), "{kept}");
        assert!(kept.lines().count() >= 3 * 9, "{}", kept.lines().count());
    }

    #[test]
    fn a_line_longer_than_the_limit_gets_a_file_of_its_own_and_reopening_continues() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.log");
        let mut log = RotatingFile::open(&path, limits(20, 2)).unwrap();
        log.append(b"short\n").unwrap();
        log.append(&[b'x'; 50]).unwrap();
        log.append(b"\nafter\n").unwrap();
        assert_eq!(
            files_oldest_first(&path, 2),
            [
                "short\n".to_string(),
                format!("{}\n", "x".repeat(50)),
                "after\n".to_string()
            ]
        );
        drop(log);
        let mut log = RotatingFile::open(&path, limits(20, 2)).unwrap();
        log.append(b"more\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "after\nmore\n");
    }
}
