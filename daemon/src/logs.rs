//! The pipeline log: `<data_root>/logs/pipeline_chunk<N>_<YYYYmmdd_HHMMSS>.log`, and
//! the daemon's own (`state/lavenderd.log`). Both rotate by size ([`rotating`]):
//! `<name>.1` … `<name>.<keep>` hold what came before; [`tail`] and [`follow`] read
//! across them. A worker's output reaches its log through a relay process
//! ([`relay`]), so it keeps rotating when the worker outlives the daemon; the daemon
//! adds the story of the run to it ([`story`]: progress, milestones, alerts).

pub(crate) mod follow;
pub(crate) mod relay;
pub(crate) mod rotating;
pub(crate) mod story;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use lavender::layout::Layout;

/// The current pipeline's log (`recorded`, the pipeline record's), else the newest
/// one in `logs/`.
pub fn current_log(layout: &Layout, recorded: Option<&Path>) -> Option<PathBuf> {
    recorded
        .filter(|p| p.is_file())
        .map(Path::to_path_buf)
        .or_else(|| newest_log(&layout.logs_dir()))
}

pub fn newest_log(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("pipeline_chunk") && name.ends_with(".log")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, p)| p)
}

/// The last `n` lines of the log at `path`, taken from its rotated files
/// (`<path>.1`, `<path>.2`, …) too when the current one holds fewer.
pub fn tail(path: &Path, n: usize) -> std::io::Result<String> {
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    tail_to(path, &f, len, n)
}

/// [`tail`] of the current file `current` (open at `path`) up to byte `end`, then of
/// the rotated files before it.
pub fn tail_to(path: &Path, current: &File, end: u64, n: usize) -> std::io::Result<String> {
    let mut bytes = last_lines(current, end, n)?;
    let mut k = 1;
    while count_lines(&bytes) < n {
        let Ok(older) = File::open(rotating::rotated(path, k)) else {
            break;
        };
        let len = older.metadata()?.len();
        let mut more = last_lines(&older, len, n - count_lines(&bytes))?;
        more.extend_from_slice(&bytes);
        bytes = more;
        k += 1;
    }
    let mut out = String::from_utf8_lossy(&bytes).into_owned();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

/// Where the last whole line before byte `end` of `f` ends: `lavenderd logs -f` shows
/// the lines before it, and follows from it (a line being written is shown once, whole).
pub fn line_start_before(f: &File, end: u64) -> std::io::Result<u64> {
    let mut pos = end;
    let mut buf = vec![0u8; 16 * 1024];
    while pos > 0 {
        let read = (buf.len() as u64).min(pos);
        pos -= read;
        let chunk = &mut buf[..read as usize];
        f.read_exact_at(chunk, pos)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(pos + i as u64 + 1);
        }
    }
    Ok(0)
}

fn count_lines(bytes: &[u8]) -> usize {
    let newlines = bytes.iter().filter(|&&b| b == b'\n').count();
    newlines + usize::from(!bytes.is_empty() && !bytes.ends_with(b"\n"))
}

/// The bytes of the last `n` lines of `f` that end by byte `end` (a final line
/// without its newline counts), reading backwards in blocks so a huge log costs little.
fn last_lines(f: &File, end: u64, n: usize) -> std::io::Result<Vec<u8>> {
    const BLOCK: u64 = 16 * 1024;
    let mut pos = end;
    let mut buf: Vec<u8> = Vec::new();
    while pos > 0 && count_lines(&buf) <= n {
        let read = BLOCK.min(pos);
        pos -= read;
        let mut chunk = vec![0; read as usize];
        f.read_exact_at(&mut chunk, pos)?;
        chunk.extend_from_slice(&buf);
        buf = chunk;
    }
    // Drop whole lines from the front until `n` are left.
    let mut extra = count_lines(&buf).saturating_sub(n);
    let mut from = 0;
    while extra > 0 {
        match buf[from..].iter().position(|&b| b == b'\n') {
            Some(i) => from += i + 1,
            None => from = buf.len(),
        }
        extra -= 1;
    }
    Ok(buf.split_off(from))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tail_returns_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.log");
        let text: String = (0..50_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&p, text).unwrap();
        assert_eq!(super::tail(&p, 2).unwrap(), "line 49998\nline 49999\n");
        assert_eq!(super::tail(&p, 0).unwrap(), "");
    }

    #[test]
    fn tail_reaches_into_the_rotated_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.log");
        std::fs::write(super::rotating::rotated(&p, 2), "a\nb\n").unwrap();
        std::fs::write(super::rotating::rotated(&p, 1), "c\n").unwrap();
        std::fs::write(&p, "d\ne\n").unwrap();
        assert_eq!(super::tail(&p, 1).unwrap(), "e\n");
        assert_eq!(super::tail(&p, 3).unwrap(), "c\nd\ne\n");
        assert_eq!(super::tail(&p, 9).unwrap(), "a\nb\nc\nd\ne\n");
        // A line still being written counts; following starts before it.
        std::fs::write(&p, "d\ne\nhalf").unwrap();
        assert_eq!(super::tail(&p, 2).unwrap(), "e\nhalf\n");
        let f = std::fs::File::open(&p).unwrap();
        assert_eq!(super::line_start_before(&f, 8).unwrap(), 4);
        assert_eq!(super::tail_to(&p, &f, 4, 2).unwrap(), "d\ne\n");
    }
}
