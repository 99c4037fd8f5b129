//! `downloads`: gathers the corpus into `corpus/raw/` from the configured sources — the
//! embedded default, local files, directories and globs, and verified URLs. Text files
//! are copied (decompressed when gzip or zstd) and split into documents by dedup; text
//! files that are not UTF-8 are skipped and counted. Record sources (JSONL, Parquet, a
//! `datasets` folder) are converted here, one document per record, into JSONL document
//! files, which the manifest lists under `document_files`; a record that cannot be read
//! fails the step or, with `data.on_bad_record: skip`, is counted (`skipped_records`).

use std::cell::Cell;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context, Result, bail, ensure};
use lavender::config::{
    Compression, DataSource, EmbeddedCorpus, OnBadRecord, PathSource, SourceFormat,
};
use serde_json::{Value, json};

use super::documents::{DocWriter, Splitter, sha256_file};
use super::http;
use super::manifest::{InputFingerprint, StepManifest, fingerprint};
use super::records::{self, Place, Record, RecordFile, RecordFormat, compressed};
use super::stage;
use super::step::{self, Ctx};
use crate::failure::KindExt;
use crate::progress::{Progress, group};
use lavender::events::Event;
use lavender::failure::FailureKind;

pub const STEP: &str = lavender::pipeline_step::PipelineStep::Downloads.as_str();
const VERSION: u32 = 1;

/// The embedded default corpus, gzip-compressed in the repository's data/ directory.
const TINYSHAKESPEARE_GZ: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../data/tinyshakespeare.txt.gz"
));

/// The manifest's list of outputs that are JSONL document files (one document a
/// line, from record sources) rather than text to split.
pub const DOCUMENT_FILES: &str = "document_files";
/// Skipped bad records the manifest keeps, with their places (the count is complete).
const SKIPPED_SHOWN: usize = 20;

/// One file of the corpus-to-be and where it comes from.
enum Item {
    Embedded {
        name: String,
        gz: &'static [u8],
    },
    /// A text file, decompressed when it is compressed.
    File {
        src: PathBuf,
        compression: Compression,
    },
    /// A file of records, converted to a JSONL document file; `source` is its index in
    /// `data.sources`.
    Records {
        source: usize,
        file: RecordFile,
    },
    Url {
        url: String,
        sha256: String,
    },
}

/// The outputs of a downloads manifest that are JSONL document files.
pub fn document_files(m: &StepManifest) -> HashSet<String> {
    m.extra
        .get(DOCUMENT_FILES)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Bad records met so far, and what `data.on_bad_record` says to do with them.
struct BadRecords {
    policy: OnBadRecord,
    count: u64,
    shown: Vec<Value>,
}

impl BadRecords {
    fn record(&mut self, source: usize, file: &Path, at: Place, reason: &str) -> Result<()> {
        let place = at.in_file(file);
        match self.policy {
            OnBadRecord::Fail => bail!(
                "data.sources[{source}]: {place}: {reason}; fix or remove that record, or set data.on_bad_record: skip to skip such records"
            ),
            OnBadRecord::Skip => {
                self.count += 1;
                if self.shown.len() < SKIPPED_SHOWN {
                    self.shown
                        .push(json!({"source": source, "at": place, "reason": reason}));
                }
                Ok(())
            }
        }
    }
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
    let mut slice = json!({
        "sources": sources,
        "document_separator": ctx.settings.data.document_separator,
    });
    let policy = ctx.settings.data.on_bad_record;
    // Only record sources have records to skip; text-only configs keep their hash.
    if plan.iter().any(|p| matches!(p.item, Item::Records { .. })) {
        slice["on_bad_record"] = json!(policy.as_str());
    }
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
    let mut document_outputs = Vec::new();
    let mut bad = BadRecords {
        policy,
        count: 0,
        shown: Vec::new(),
    };
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
            Item::File { src, compression } => {
                let read = Rc::new(Cell::new(0));
                let mut r = compressed::open(src, *compression, read)
                    .with_context(|| format!("could not open source file {}", src.display()))?;
                copy_text(&mut r, src, &dest, sep, &mut progress)?
            }
            Item::Records { source, file } => {
                // Missing, damaged or bad input: a `data` failure, not one to retry.
                let docs = convert_records(*source, file, &dest, &mut bad, &mut progress)
                    .kind(FailureKind::Data)?;
                document_outputs.push(format!("raw/{}", p.dest));
                Some(docs)
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
    m.counts.insert("skipped_records".into(), bad.count);
    if bad.count > 0 {
        m.extra.insert("skipped_records".into(), json!(bad.shown));
        eprintln!(
            "downloads: skipped {} bad record(s) (data.on_bad_record: skip); the first: {}: {}",
            group(bad.count),
            bad.shown[0]["at"].as_str().unwrap_or_default(),
            bad.shown[0]["reason"].as_str().unwrap_or_default()
        );
    }
    if !document_outputs.is_empty() {
        m.extra
            .insert(DOCUMENT_FILES.into(), json!(document_outputs));
    }
    m.outputs = outputs;
    step::commit(ctx, staged, m)?;
    ctx.event(
        Event::new(
            "data_loaded",
            format!(
                "data loaded: {} docs from {} sources ({:.1} MB{}{})",
                group(documents),
                sources.len(),
                bytes as f64 / 1e6,
                if skipped.is_empty() {
                    String::new()
                } else {
                    format!(", {} non-UTF-8 file(s) skipped", skipped.len())
                },
                if bad.count == 0 {
                    String::new()
                } else {
                    format!(", {} bad record(s) skipped", group(bad.count))
                }
            ),
        )
        .with("documents", documents)
        .with("sources", sources.len())
        .with("bytes", bytes)
        .with("skipped_non_utf8", skipped.len())
        .with("skipped_records", bad.count),
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
            DataSource::Path(source) => {
                for (src, dest) in local_files(ctx, i, source).kind(FailureKind::Data)? {
                    inputs.push(fingerprint(&src)?);
                    let item = match RecordFormat::of(source.format) {
                        None => Item::File {
                            src,
                            compression: source.compression,
                        },
                        Some(format) => Item::Records {
                            source: i,
                            file: RecordFile {
                                path: src,
                                format,
                                compression: source.compression,
                                key: source.text_key().to_string(),
                            },
                        },
                    };
                    plan.push(Planned { item, dest });
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
    let mut dests = HashSet::new();
    for p in &plan {
        if !dests.insert(p.dest.as_str()) {
            bail!(
                "two source files would both be corpus/raw/{} (a file and its compressed copy?); keep one of them",
                p.dest
            );
        }
    }
    Ok((plan, inputs))
}

/// The files of local source `i` with their names under corpus/raw/: the file itself,
/// the files of a directory (recursively) or of a glob's matches, or the Arrow files of
/// a `datasets` folder. Directories give the files of the source's format (all files for
/// text). Compressed names lose their compression extension; record files are named
/// `*.jsonl`, the document files they become.
fn local_files(ctx: &Ctx, i: usize, source: &PathSource) -> Result<Vec<(PathBuf, String)>> {
    let path = ctx.settings.config_path(&source.path);
    let shown = path.display();
    let pattern = path.to_string_lossy().into_owned();
    let is_glob = pattern.contains(['*', '?', '[']);
    // (file, its path relative to `base`); `base` names the source under corpus/raw/.
    let (base, files): (PathBuf, Vec<PathBuf>) = if source.format == SourceFormat::Datasets {
        if !path.is_dir() {
            return Err(ctx.settings.config_error(
                &format!("data.sources[{i}].path"),
                format!(
                    "{shown} is not a directory; a datasets source is the folder save_to_disk wrote"
                ),
            ));
        }
        let files = records::datasets::data_files(&path, source.split.as_deref())
            .with_context(|| format!("data.sources[{i}]"))?;
        (path.clone(), files)
    } else if is_glob {
        let matches = glob::glob(&pattern)
            .with_context(|| format!("data.sources[{i}]: {pattern} is not a valid glob"))?;
        let mut files = Vec::new();
        for m in matches {
            let m = m.with_context(|| {
                format!("data.sources[{i}]: could not read a match of {pattern}")
            })?;
            if m.is_dir() {
                walk_format(&m, source, &mut files)?;
            } else if m.is_file() {
                files.push(m);
            }
        }
        if files.is_empty() {
            return Err(ctx.settings.config_error(
                &format!("data.sources[{i}].path"),
                format!("no file matches {pattern}; check the path (relative paths start at the config file's directory)"),
            ));
        }
        (glob_base(&path), files)
    } else {
        let meta = std::fs::metadata(&path).with_context(|| {
            format!("data.sources[{i}]: source path {shown} does not exist or cannot be read")
        })?;
        if meta.is_dir() {
            let mut files = Vec::new();
            walk_format(&path, source, &mut files)?;
            if files.is_empty() && source.format != SourceFormat::Text {
                return Err(ctx.settings.config_error(
                    &format!("data.sources[{i}].path"),
                    format!(
                        "{shown} has no {} files; give the files' directory, a glob, or the format they have",
                        format_extensions(source.format).join(" or ")
                    ),
                ));
            }
            (path.clone(), files)
        } else {
            (
                path.parent().map(Path::to_path_buf).unwrap_or_default(),
                vec![path.clone()],
            )
        }
    };
    let single = !is_glob && source.format != SourceFormat::Datasets && path.is_file();
    let name = |p: &Path| {
        p.file_name()
            .map_or_else(|| "source".into(), |n| n.to_string_lossy().into_owned())
    };
    let mut files = files;
    // A datasets folder's files keep the order its state.json gives them.
    if source.format != SourceFormat::Datasets {
        files.sort();
        files.dedup();
    }
    Ok(files
        .into_iter()
        .map(|f| {
            let rel = if single {
                name(&f)
            } else {
                let rel = f
                    .strip_prefix(&base)
                    .unwrap_or(&f)
                    .to_string_lossy()
                    .into_owned();
                format!("{}/{rel}", name(&base))
            };
            let compression = compressed::resolve(&f, source.compression);
            let mut dest = match source.format {
                SourceFormat::Parquet | SourceFormat::Datasets => rel.clone(),
                _ => compressed::stem(&rel, compression).to_string(),
            };
            if source.format.is_records() && !dest.ends_with(".jsonl") {
                dest.push_str(".jsonl");
            }
            (f, format!("{i:03}-{dest}"))
        })
        .collect())
}

/// The directory part of a glob before its first wildcard (`dumps/2024/*.gz` → `dumps/2024`).
fn glob_base(pattern: &Path) -> PathBuf {
    let mut base = PathBuf::new();
    for c in pattern.components() {
        if c.as_os_str().to_string_lossy().contains(['*', '?', '[']) {
            break;
        }
        base.push(c);
    }
    base
}

/// The file names a directory source of `format` takes (text: every file).
fn format_extensions(format: SourceFormat) -> &'static [&'static str] {
    match format {
        SourceFormat::Text => &[],
        SourceFormat::Jsonl => &["*.jsonl", "*.ndjson"],
        SourceFormat::Parquet => &["*.parquet"],
        SourceFormat::Datasets => &["*.arrow"],
    }
}

/// The files under `dir` a source of its format reads: every regular file for text,
/// else those with the format's extensions (after a compression extension).
fn walk_format(dir: &Path, source: &PathSource, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut all = Vec::new();
    walk(dir, &mut all)?;
    let exts = format_extensions(source.format);
    out.extend(all.into_iter().filter(|f| {
        exts.is_empty() || {
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = compressed::stem(&name, compressed::resolve(f, source.compression));
            exts.iter().any(|e| name.ends_with(&e[1..]))
        }
    }));
    Ok(())
}

/// Converts one record file into a JSONL document file at `dest`; returns its documents.
fn convert_records(
    source: usize,
    file: &RecordFile,
    dest: &Path,
    bad: &mut BadRecords,
    progress: &mut Progress,
) -> Result<u64> {
    let mut out = DocWriter::create(dest)?;
    let read = Rc::new(Cell::new(0u64));
    let (mut reported, mut bad_here) = (0u64, 0u64);
    let mut first_bad = None;
    file.read(&read, &mut |record| {
        let done = match record {
            Record::Text("") => 0,
            Record::Text(text) => {
                out.write(text)?;
                1
            }
            Record::Bad { at, reason } => {
                bad_here += 1;
                if first_bad.is_none() {
                    first_bad = Some(format!("{}: {reason}", at.in_file(&file.path)));
                }
                bad.record(source, &file.path, at, &reason)?;
                0
            }
        };
        let now = read.get();
        progress.advance(now - reported, done);
        reported = now;
        Ok(())
    })?;
    let (docs, _, _) = out.finish()?;
    if docs == 0
        && let Some(first) = first_bad
    {
        bail!(
            "data.sources[{source}]: none of the {bad_here} record(s) of {} could be read (the first: {first}); check the source's format and field",
            file.path.display()
        );
    }
    Ok(docs)
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
