//! `downloads`: gathers the corpus into `corpus/raw/` from the configured sources — the
//! embedded default, local files and directories, and verified URLs. Files that are not
//! UTF-8 are skipped and counted.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use lavender::config::{DataSource, EmbeddedCorpus};
use serde_json::json;

use super::documents::{Splitter, sha256_file};
use super::http;
use super::manifest::{InputFingerprint, fingerprint};
use super::stage;
use super::step::{self, Ctx};
use crate::progress::{Progress, group};
use lavender::events::Event;

pub const STEP: &str = "downloads";
const VERSION: u32 = 1;

/// The embedded default corpus, gzip-compressed in the repository's data/ directory.
const TINYSHAKESPEARE_GZ: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../data/tinyshakespeare.txt.gz"
));

/// One file of the corpus-to-be and where it comes from.
enum Item {
    Embedded { name: String, gz: &'static [u8] },
    File { src: PathBuf },
    Url { url: String, sha256: String },
}

struct Planned {
    item: Item,
    /// Path under corpus/raw/.
    dest: String,
}

pub fn run(ctx: &Ctx) -> Result<()> {
    let sources = &ctx.settings.data.sources;
    ensure!(
        !sources.is_empty(),
        "data.sources is empty: list at least one source, e.g. `- embedded: tinyshakespeare`"
    );
    let (plan, inputs) = plan(ctx, sources)?;
    let slice = json!({
        "sources": sources,
        "document_separator": ctx.settings.data.document_separator,
    });
    let config_hash = step::config_hash(STEP, VERSION, &slice);
    if let Some(m) = step::fresh_manifest(ctx, STEP, &config_hash, &inputs)? {
        step::say_skipped(STEP, &m);
        return Ok(());
    }

    let corpus = ctx.root.join(lavender::data_root::CORPUS);
    let raw = corpus.join("raw");
    let staged = stage::begin(&raw)?;
    // Progress counts text bytes, so the embedded corpus counts at its uncompressed size.
    let total: u64 = plan
        .iter()
        .zip(&inputs)
        .map(|(p, i)| match &p.item {
            Item::Embedded { gz, .. } => gzip_size(gz),
            _ => i.size,
        })
        .sum();
    let mut progress = Progress::new(STEP, Some(total), "docs");
    let sep = &ctx.settings.data.document_separator;
    let (mut documents, mut bytes, mut skipped) = (0u64, 0u64, Vec::new());
    let mut outputs = Vec::new();
    for p in &plan {
        let dest = staged.dir().join(&p.dest);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("could not create {}", parent.display()))?;
        }
        let docs = match &p.item {
            Item::Embedded { name, gz } => {
                let mut r = flate2::read::GzDecoder::new(*gz);
                copy_text(&mut r, Path::new(name), &dest, sep, &mut progress)?
            }
            Item::File { src } => {
                let mut r = std::fs::File::open(src)
                    .with_context(|| format!("could not open source file {}", src.display()))?;
                copy_text(&mut r, src, &dest, sep, &mut progress)?
            }
            Item::Url { url, sha256 } => {
                let file = previous_copy(&raw.join(&p.dest), sha256)
                    .map_or_else(|| http::fetch(url, sha256, &corpus.join(".partial")), Ok)?;
                let mut r = std::fs::File::open(&file)
                    .with_context(|| format!("could not open {}", file.display()))?;
                let docs = copy_text(&mut r, Path::new(url), &dest, sep, &mut progress)?;
                if file.starts_with(corpus.join(".partial")) {
                    let _ = std::fs::remove_file(&file);
                }
                docs
            }
        };
        match docs {
            Some(n) => {
                documents += n;
                bytes += std::fs::metadata(&dest).map(|m| m.len()).unwrap_or(0);
                outputs.push(format!("raw/{}", p.dest));
            }
            None => skipped.push(p.dest.clone()),
        }
    }
    progress.finish();
    if documents == 0 {
        bail!(
            "the corpus is empty: data.sources gave no documents{}; add text files to the sources",
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({} file(s) skipped as not UTF-8)", skipped.len())
            }
        );
    }

    let mut m = step::new_manifest(STEP, VERSION, config_hash, inputs);
    m.counts.insert("documents".into(), documents);
    m.counts.insert("sources".into(), sources.len() as u64);
    m.counts.insert("bytes".into(), bytes);
    m.counts.insert("files".into(), outputs.len() as u64);
    m.counts
        .insert("skipped_non_utf8".into(), skipped.len() as u64);
    m.extra.insert("skipped_non_utf8".into(), json!(skipped));
    m.outputs = outputs;
    step::commit(ctx, staged, m)?;
    ctx.event(
        Event::new(
            "data_loaded",
            format!(
                "data loaded: {} docs from {} sources ({:.1} MB{})",
                group(documents),
                sources.len(),
                bytes as f64 / 1e6,
                if skipped.is_empty() {
                    String::new()
                } else {
                    format!(", {} non-UTF-8 file(s) skipped", skipped.len())
                }
            ),
        )
        .with("documents", documents)
        .with("sources", sources.len())
        .with("bytes", bytes)
        .with("skipped_non_utf8", skipped.len()),
    )
}

/// Resolve every source to files and fingerprint them (cheap: size and mtime only).
fn plan(ctx: &Ctx, sources: &[DataSource]) -> Result<(Vec<Planned>, Vec<InputFingerprint>)> {
    let mut plan = Vec::new();
    let mut inputs = Vec::new();
    for (i, source) in sources.iter().enumerate() {
        match source {
            DataSource::Embedded(corpus) => {
                let embedded = corpus.as_str();
                let gz = match corpus {
                    EmbeddedCorpus::Tinyshakespeare => TINYSHAKESPEARE_GZ,
                };
                inputs.push(InputFingerprint {
                    path: format!("embedded:{embedded}").into(),
                    size: gz.len() as u64,
                    mtime_ns: 0,
                    sha256: Some(super::documents::hex(
                        &<sha2::Sha256 as sha2::Digest>::digest(gz),
                    )),
                });
                plan.push(Planned {
                    item: Item::Embedded {
                        name: format!("embedded:{embedded}"),
                        gz,
                    },
                    dest: format!("{i:03}-{embedded}.txt"),
                });
            }
            DataSource::Path(path) => {
                let src = ctx.settings.config_path(path);
                let meta = std::fs::metadata(&src).with_context(|| {
                    format!(
                        "data.sources[{i}]: source path {} does not exist or cannot be read",
                        src.display()
                    )
                })?;
                let name = src
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "source".into());
                if meta.is_dir() {
                    let mut files = Vec::new();
                    walk(&src, &mut files)?;
                    files.sort();
                    for f in files {
                        let rel = f.strip_prefix(&src).expect("walked under src");
                        inputs.push(fingerprint(&f)?);
                        plan.push(Planned {
                            dest: format!("{i:03}-{name}/{}", rel.to_string_lossy()),
                            item: Item::File { src: f },
                        });
                    }
                } else {
                    inputs.push(fingerprint(&src)?);
                    plan.push(Planned {
                        item: Item::File { src },
                        dest: format!("{i:03}-{name}"),
                    });
                }
            }
            DataSource::Url { url, sha256 } => {
                ensure!(
                    url.starts_with("http://") || url.starts_with("https://"),
                    "data.sources[{i}]: {url:?} is not an http(s) URL"
                );
                ensure!(
                    sha256.len() == 64 && sha256.chars().all(|c| c.is_ascii_hexdigit()),
                    "data.sources[{i}]: sha256 {sha256:?} is not 64 hex digits"
                );
                let name = url
                    .split(['?', '#'])
                    .next()
                    .and_then(|u| u.rsplit('/').next())
                    .filter(|n| !n.is_empty())
                    .unwrap_or("download");
                inputs.push(InputFingerprint {
                    path: url.into(),
                    size: 0,
                    mtime_ns: 0,
                    sha256: Some(sha256.to_ascii_lowercase()),
                });
                plan.push(Planned {
                    item: Item::Url {
                        url: url.clone(),
                        sha256: sha256.clone(),
                    },
                    dest: format!("{i:03}-{name}"),
                });
            }
        }
    }
    Ok((plan, inputs))
}

/// Regular files under `dir`, recursively; hidden entries are skipped.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("could not read source directory {}", dir.display()))?;
    for entry in entries {
        let entry =
            entry.with_context(|| format!("could not read source directory {}", dir.display()))?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let p = entry.path();
        let meta =
            std::fs::metadata(&p).with_context(|| format!("could not read {}", p.display()))?;
        if meta.is_dir() {
            walk(&p, out)?;
        } else if meta.is_file() {
            out.push(p);
        }
    }
    Ok(())
}

/// The file of the previous corpus, when it already has the expected content (so a rerun
/// after a config change elsewhere does not download it again).
fn previous_copy(path: &Path, sha256: &str) -> Option<PathBuf> {
    let got = sha256_file(path).ok()?;
    got.eq_ignore_ascii_case(sha256).then(|| path.to_path_buf())
}

/// Copy `r` to `dest`, counting documents. `Ok(None)` (and no `dest`) when the text is
/// not UTF-8.
fn copy_text(
    r: &mut dyn Read,
    name: &Path,
    dest: &Path,
    separator: &str,
    progress: &mut Progress,
) -> Result<Option<u64>> {
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(dest)
            .with_context(|| format!("could not create {}", dest.display()))?,
    );
    let mut splitter = Splitter::new(separator);
    let (mut docs, mut utf8) = (0u64, true);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r
            .read(&mut buf)
            .with_context(|| format!("could not read {}", name.display()))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .with_context(|| format!("could not write {}", dest.display()))?;
        let before = docs;
        splitter.feed(&buf[..n], |d| {
            utf8 &= std::str::from_utf8(d).is_ok();
            docs += 1;
            Ok(())
        })?;
        progress.advance(n as u64, docs - before);
        if !utf8 {
            break;
        }
    }
    if utf8 {
        splitter.finish(|d| {
            utf8 &= std::str::from_utf8(d).is_ok();
            docs += 1;
            Ok(())
        })?;
    }
    out.flush()
        .with_context(|| format!("could not write {}", dest.display()))?;
    drop(out);
    if !utf8 {
        std::fs::remove_file(dest)
            .with_context(|| format!("could not remove {}", dest.display()))?;
        eprintln!("downloads: skipped {}: not UTF-8 text", name.display());
        return Ok(None);
    }
    Ok(Some(docs))
}

/// The uncompressed size a gzip stream records in its last four bytes (mod 4 GiB).
fn gzip_size(gz: &[u8]) -> u64 {
    gz.len().checked_sub(4).map_or(0, |at| {
        u32::from_le_bytes(gz[at..].try_into().expect("4 bytes")) as u64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_corpus_is_tinyshakespeare() {
        let mut text = String::new();
        flate2::read::GzDecoder::new(TINYSHAKESPEARE_GZ)
            .read_to_string(&mut text)
            .unwrap();
        assert!(text.starts_with("First Citizen:\nBefore we proceed any further"));
        assert_eq!(gzip_size(TINYSHAKESPEARE_GZ), text.len() as u64);
    }
}
