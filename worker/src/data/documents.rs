//! Documents: how text files split into documents, and the JSONL document files the
//! steps pass along (`{"text": "..."}` a line: exact for any text, streamable, greppable).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Splits a byte stream into documents at `separator`, pushed a chunk at a time so a
/// file of any size is read with memory bounded by its largest document.
pub struct Splitter {
    separator: Vec<u8>,
    buf: Vec<u8>,
    searched: usize,
}

impl Splitter {
    /// An empty separator makes each stream one document.
    pub fn new(separator: &str) -> Splitter {
        Splitter {
            separator: separator.as_bytes().to_vec(),
            buf: Vec::new(),
            searched: 0,
        }
    }

    /// Feed the next chunk; `emit` gets every document completed by it.
    pub fn feed(&mut self, chunk: &[u8], mut emit: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        self.buf.extend_from_slice(chunk);
        if self.separator.is_empty() {
            return Ok(());
        }
        let mut start = 0;
        let finder = memchr::memmem::Finder::new(&self.separator);
        // Resume the search just before the old end: a separator may straddle chunks.
        let mut from = self
            .searched
            .saturating_sub(self.separator.len() - 1)
            .max(start);
        while let Some(pos) = finder.find(&self.buf[from..]) {
            let end = from + pos;
            emit_trimmed(&self.buf[start..end], &mut emit)?;
            start = end + self.separator.len();
            from = start;
        }
        self.buf.drain(..start);
        self.searched = self.buf.len();
        Ok(())
    }

    /// End of stream: the last document.
    pub fn finish(&mut self, mut emit: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let rest = std::mem::take(&mut self.buf);
        self.searched = 0;
        emit_trimmed(&rest, &mut emit)
    }
}

/// Documents are trimmed of surrounding line breaks; empty ones are not documents.
fn emit_trimmed(doc: &[u8], emit: &mut impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let is_break = |b: &u8| *b == b'\n' || *b == b'\r';
    let start = doc.iter().position(|b| !is_break(b)).unwrap_or(doc.len());
    let end = doc
        .iter()
        .rposition(|b| !is_break(b))
        .map_or(start, |e| e + 1);
    if start < end {
        emit(&doc[start..end])?;
    }
    Ok(())
}

/// Read `path` through a splitter; `on_doc(doc, bytes_read_since_last_call)`.
pub fn for_each_document_in_file(
    path: &Path,
    separator: &str,
    mut on_doc: impl FnMut(&[u8], u64) -> Result<()>,
) -> Result<()> {
    let mut f = File::open(path).with_context(|| format!("could not open {}", path.display()))?;
    let mut splitter = Splitter::new(separator);
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut chunk)
            .with_context(|| format!("could not read {}", path.display()))?;
        if n == 0 {
            break;
        }
        let mut bytes = n as u64;
        splitter.feed(&chunk[..n], |d| on_doc(d, std::mem::take(&mut bytes)))?;
        if bytes > 0 {
            on_doc(&[], bytes)?;
        }
    }
    splitter.finish(|d| on_doc(d, 0))
}

#[derive(Serialize, Deserialize)]
struct Doc<'a> {
    #[serde(borrow)]
    text: std::borrow::Cow<'a, str>,
}

/// Writes a JSONL document file and hashes what it writes.
pub struct DocWriter {
    out: BufWriter<File>,
    path: PathBuf,
    hasher: Sha256,
    bytes: u64,
    docs: u64,
}

impl DocWriter {
    pub fn create(path: &Path) -> Result<DocWriter> {
        let f =
            File::create(path).with_context(|| format!("could not create {}", path.display()))?;
        Ok(DocWriter {
            out: BufWriter::with_capacity(1 << 20, f),
            path: path.to_path_buf(),
            hasher: Sha256::new(),
            bytes: 0,
            docs: 0,
        })
    }

    pub fn write(&mut self, text: &str) -> Result<()> {
        let mut line = serde_json::to_vec(&Doc { text: text.into() })?;
        line.push(b'\n');
        self.out
            .write_all(&line)
            .with_context(|| format!("could not write {}", self.path.display()))?;
        self.hasher.update(&line);
        self.bytes += line.len() as u64;
        self.docs += 1;
        Ok(())
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Flush; returns (documents, bytes, sha256 hex). Durability comes later, once for
    /// the whole output, when its staging directory is committed.
    pub fn finish(self) -> Result<(u64, u64, String)> {
        let path = self.path;
        self.out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("could not write {}", path.display()))?;
        Ok((self.docs, self.bytes, hex(&self.hasher.finalize())))
    }
}

/// Calls `on_doc(text, line_bytes)` for every document of a JSONL document file.
pub fn read_docs(path: &Path, mut on_doc: impl FnMut(&str, u64) -> Result<()>) -> Result<()> {
    read_docs_while(path, |text, bytes| on_doc(text, bytes).map(|()| true))
}

/// As [`read_docs`], stopping early when `on_doc` returns `false`.
pub fn read_docs_while(
    path: &Path,
    mut on_doc: impl FnMut(&str, u64) -> Result<bool>,
) -> Result<()> {
    let f = File::open(path).with_context(|| format!("could not open {}", path.display()))?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let mut line = String::new();
    let mut lineno = 0u64;
    loop {
        line.clear();
        let n = r
            .read_line(&mut line)
            .with_context(|| format!("could not read {}", path.display()))?;
        if n == 0 {
            return Ok(());
        }
        lineno += 1;
        let doc: Doc = serde_json::from_str(&line).with_context(|| {
            format!(
                "{}:{lineno} is not a document line; rerun the step that wrote it with --force",
                path.display()
            )
        })?;
        if !on_doc(&doc.text, n as u64)? {
            return Ok(());
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 128 bits of SHA-256: collision-free in practice, half the memory of the full hash.
pub fn content_hash(text: &[u8]) -> u128 {
    let d = Sha256::digest(text);
    u128::from_le_bytes(d[..16].try_into().expect("16 bytes"))
}

/// A document's deterministic position in [0, 1): splits by hash are stable across runs
/// and independent of document order.
pub fn unit_hash(text: &[u8], salt: &str) -> f64 {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update(text);
    let d = h.finalize();
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes")) as f64 / (u64::MAX as f64 + 1.0)
}

/// SHA-256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("could not open {}", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("could not read {}", path.display()))?;
    Ok(hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(sep: &str, chunks: &[&str]) -> Vec<String> {
        let mut s = Splitter::new(sep);
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c.as_bytes(), |d| {
                out.push(String::from_utf8(d.to_vec()).unwrap());
                Ok(())
            })
            .unwrap();
        }
        s.finish(|d| {
            out.push(String::from_utf8(d.to_vec()).unwrap());
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn splits_at_separators_across_chunk_boundaries() {
        let want = vec!["a\nb", "c", "d"];
        assert_eq!(split("\n\n", &["a\nb\n\nc\n\n\n\nd\n"]), want);
        assert_eq!(split("\n\n", &["a\nb\n", "\nc\n", "\n", "\n\nd"]), want);
        assert_eq!(split("\n\n", &["a", "\nb", "\n", "\n", "c\n\n\nd"]), want);
        assert_eq!(split("", &["a\n\nb", "c"]), vec!["a\n\nbc"]);
        assert_eq!(split("---", &["x-", "--y--", "-z"]), vec!["x", "y", "z"]);
        assert!(split("\n\n", &["\n\n\n\n"]).is_empty());
    }

    #[test]
    fn doc_files_round_trip_any_text() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("d.jsonl");
        let texts = ["plain", "with \"quotes\"\nand\nlines", "ünïcødé ✓ \u{1}"];
        let mut w = DocWriter::create(&p).unwrap();
        for t in texts {
            w.write(t).unwrap();
        }
        let (docs, bytes, sha) = w.finish().unwrap();
        assert_eq!(docs, 3);
        assert_eq!(bytes, std::fs::metadata(&p).unwrap().len());
        assert_eq!(sha, sha256_file(&p).unwrap());
        let mut back = Vec::new();
        read_docs(&p, |t, _| {
            back.push(t.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(back, texts);
    }

    #[test]
    fn a_damaged_doc_file_names_file_and_line() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("d.jsonl");
        std::fs::write(&p, "{\"text\":\"ok\"}\n{\"text\":\"cut").unwrap();
        let err = format!("{:#}", read_docs(&p, |_, _| Ok(())).unwrap_err());
        assert!(err.contains("d.jsonl:2"), "{err}");
    }
}
