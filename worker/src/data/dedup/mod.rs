//! `dedup`: drops exact duplicate documents (and, with `data.dedup.paragraphs`, repeated
//! paragraphs) by content hash, and with `data.dedup.near_duplicates` near copies by
//! MinHash. Streams the corpus and keeps only hashes, so its memory grows with the number
//! of distinct documents, not with their text.

mod minhash;

use std::collections::HashSet;

use anyhow::{Result, bail};
use serde_json::json;

use super::documents::{DocWriter, content_hash, for_each_document_in_file, read_docs};
use super::stage;
use super::step::{self, Ctx};
use crate::progress::{Progress, group};

pub const STEP: &str = lavender::pipeline_step::PipelineStep::Dedup.as_str();
const VERSION: u32 = 1;
pub const OUTPUT: &str = "documents.jsonl";

pub fn run(ctx: &Ctx) -> Result<()> {
    let cfg = &ctx.settings.data.dedup;
    let up = step::upstream(ctx, super::downloads::STEP, STEP)?;
    let files = step::upstream_outputs(ctx, &up)?;
    let slice = json!({
        "dedup": cfg,
        "document_separator": ctx.settings.data.document_separator,
    });
    let config_hash = step::config_hash(STEP, VERSION, &slice);
    let inputs: Vec<_> = files.iter().map(|(_, f)| f.clone()).collect();
    if let Some(m) = step::fresh_manifest(ctx, STEP, &config_hash, &inputs)? {
        step::say_skipped(STEP, &m);
        return Ok(());
    }

    let target = ctx.root.join(lavender::data_root::DEDUP);
    let staged = stage::begin(&target)?;
    let mut out = DocWriter::create(&staged.dir().join(OUTPUT))?;
    let mut progress = Progress::new(STEP, Some(step::total_size(&files)), "docs");
    let mut seen_docs: HashSet<u128> = HashSet::new();
    let mut seen_paragraphs: HashSet<u128> = HashSet::new();
    let mut near = cfg
        .near_duplicates
        .then(|| minhash::NearDuplicates::new(cfg.near_threshold));
    let (mut input_docs, mut removed, mut removed_paragraphs) = (0u64, 0u64, 0u64);
    let mut removed_near = 0u64;
    let mut kept_text = String::new();
    // Text files split at the separator; record sources' document files are one
    // document a line already.
    let document_files = super::downloads::document_files(&up);
    for ((path, _), name) in files.iter().zip(&up.outputs) {
        let mut on_doc = |doc: &[u8], bytes: u64| -> Result<()> {
            if doc.is_empty() {
                progress.advance(bytes, 0);
                return Ok(());
            }
            input_docs += 1;
            progress.advance(bytes, 1);
            if !seen_docs.insert(content_hash(doc)) {
                removed += 1;
                return Ok(());
            }
            let text = std::str::from_utf8(doc).map_err(|_| {
                anyhow::anyhow!(
                    "{} is not UTF-8 although downloads checked it; rerun downloads --force",
                    path.display()
                )
            })?;
            if near.as_mut().is_some_and(|nd| nd.check_and_insert(text)) {
                removed += 1;
                removed_near += 1;
                return Ok(());
            }
            if !cfg.paragraphs {
                return out.write(text);
            }
            kept_text.clear();
            for para in text.split("\n\n").filter(|p| !p.trim().is_empty()) {
                if seen_paragraphs.insert(content_hash(para.trim().as_bytes())) {
                    if !kept_text.is_empty() {
                        kept_text.push_str("\n\n");
                    }
                    kept_text.push_str(para);
                } else {
                    removed_paragraphs += 1;
                }
            }
            if kept_text.is_empty() {
                removed += 1;
                Ok(())
            } else {
                out.write(&kept_text)
            }
        };
        if document_files.contains(name) {
            read_docs(path, |text, bytes| on_doc(text.as_bytes(), bytes))?;
        } else {
            for_each_document_in_file(path, &ctx.settings.data.document_separator, on_doc)?;
        }
    }
    progress.finish();
    let (documents, bytes, _) = out.finish()?;
    if documents == 0 {
        bail!("dedup: the corpus has no documents; check data.sources and rerun downloads");
    }

    let mut m = step::new_manifest(STEP, VERSION, config_hash, inputs);
    m.counts.insert("documents".into(), documents);
    m.counts.insert("removed".into(), removed);
    m.counts
        .insert("removed_paragraphs".into(), removed_paragraphs);
    m.counts
        .insert("removed_near_duplicates".into(), removed_near);
    m.counts.insert("input_documents".into(), input_docs);
    m.counts.insert("bytes".into(), bytes);
    m.outputs = vec![OUTPUT.into()];
    step::commit(ctx, staged, m)?;
    eprintln!(
        "dedup: {} documents kept, {} duplicates removed{}{}",
        group(documents),
        group(removed),
        if cfg.near_duplicates {
            format!(" ({} of them near duplicates)", group(removed_near))
        } else {
            String::new()
        },
        if cfg.paragraphs {
            format!(
                ", {} repeated paragraphs removed",
                group(removed_paragraphs)
            )
        } else {
            String::new()
        }
    );
    Ok(())
}
