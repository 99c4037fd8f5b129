//! Whole-file compression of text and JSONL sources: gzip (one or more members, as
//! `pigz` and `bgzip` write) and zstd, chosen by `compression:` or the file's extension.
//! A stream that ends early or is damaged is an error naming the file, never a shorter
//! corpus.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context, Result};
use lavender::config::Compression;

/// The compression `file` is read through: `configured` unless it is `auto`, else by
/// extension (`.gz`, `.zst`, `.zstd`).
pub fn resolve(file: &Path, configured: Compression) -> Compression {
    if configured != Compression::Auto {
        return configured;
    }
    match file.extension().and_then(|e| e.to_str()) {
        Some("gz") => Compression::Gzip,
        Some("zst" | "zstd") => Compression::Zstd,
        _ => Compression::None,
    }
}

/// `name` without its compression extension (`a.jsonl.gz` → `a.jsonl`), when it has one.
pub fn stem(name: &str, compression: Compression) -> &str {
    let ext: &[&str] = match compression {
        Compression::Gzip => &[".gz"],
        Compression::Zstd => &[".zst", ".zstd"],
        Compression::None | Compression::Auto => &[],
    };
    ext.iter()
        .find_map(|e| name.strip_suffix(e))
        .filter(|s| !s.is_empty())
        .unwrap_or(name)
}

/// Opens `file` for reading its decompressed bytes. `read_bytes` counts the bytes read
/// from the file itself (compressed), for progress.
pub fn open(
    file: &Path,
    compression: Compression,
    read_bytes: Rc<Cell<u64>>,
) -> Result<Box<dyn Read>> {
    let f = File::open(file).with_context(|| format!("could not open {}", file.display()))?;
    let counted = BufReader::with_capacity(
        1 << 20,
        Counted {
            inner: f,
            read: read_bytes,
        },
    );
    let kind = resolve(file, compression);
    let decoder: Box<dyn Read> = match kind {
        Compression::None | Compression::Auto => return Ok(Box::new(counted)),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(counted)),
        Compression::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(counted)
                .with_context(|| format!("could not start reading {}", file.display()))?,
        ),
    };
    Ok(Box::new(Decompressed {
        inner: decoder,
        file: file.to_path_buf(),
        kind,
    }))
}

/// Counts the bytes read through it.
struct Counted {
    inner: File,
    read: Rc<Cell<u64>>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// A decoder whose errors say which file is damaged and what to do.
struct Decompressed {
    inner: Box<dyn Read>,
    file: PathBuf,
    kind: Compression,
}

impl Read for Decompressed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not a complete {} stream ({e}): the file is truncated or damaged; copy or compress it again (or set the source's `compression:` if it is not {})",
                    self.file.display(),
                    self.kind,
                    self.kind
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_follows_the_extension_unless_set() {
        let r = |name: &str, c| resolve(Path::new(name), c);
        assert_eq!(r("a.jsonl.gz", Compression::Auto), Compression::Gzip);
        assert_eq!(r("a.jsonl.zst", Compression::Auto), Compression::Zstd);
        assert_eq!(r("a.txt.zstd", Compression::Auto), Compression::Zstd);
        assert_eq!(r("a.jsonl", Compression::Auto), Compression::None);
        assert_eq!(r("a.jsonl.gz", Compression::None), Compression::None);
        assert_eq!(r("dump", Compression::Zstd), Compression::Zstd);
        assert_eq!(stem("a.jsonl.gz", Compression::Gzip), "a.jsonl");
        assert_eq!(stem("a.txt.zst", Compression::Zstd), "a.txt");
        assert_eq!(stem("dump", Compression::Zstd), "dump");
        assert_eq!(stem(".gz", Compression::Gzip), ".gz");
    }
}
