//! The pipeline log: `<data_root>/logs/pipeline_chunk<N>_<YYYYmmdd_HHMMSS>.log`.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::layout::Layout;

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

/// The last `n` lines, reading backwards in blocks so a huge log costs little.
pub fn tail(path: &Path, n: usize) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut pos = len;
    let mut buf: Vec<u8> = Vec::new();
    const BLOCK: u64 = 16 * 1024;
    while pos > 0 {
        let read = BLOCK.min(pos);
        pos -= read;
        f.seek(SeekFrom::Start(pos))?;
        let mut chunk = vec![0; read as usize];
        f.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&buf);
        buf = chunk;
        // n lines need n+1 newlines when the file ends in one.
        if buf.iter().filter(|&&b| b == b'\n').count() > n {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    let mut out = lines[start..].join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    Ok(out)
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
}
