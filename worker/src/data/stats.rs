//! `stats`: what the configured (chunk, scale) trains on, counted from build_shards'
//! outputs: the documents and whitespace-separated words its shards hold (read from the
//! shard files) and the shards' sizes on disk (total, smallest, largest).
//! `stats/manifest.json` holds the counts (the status shows them as `data.stats_*`) and
//! one entry per shard. Words, not tokens: precompute trains the tokenizer after this.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::json;

use super::documents::read_docs;
use super::manifest::{self, InputFingerprint};
use super::shards::{self, ShardEntry};
use super::stage;
use super::step::{self, Ctx};
use crate::progress::{Progress, group};
use crate::tokens::select_shards;

pub const STEP: &str = lavender::pipeline_step::PipelineStep::Stats.as_str();
const VERSION: u32 = 1;

/// One shard of the chunk as `stats/manifest.json` lists it (under `"shards"`).
#[derive(Debug, Serialize)]
struct ShardStats {
    shard: String,
    documents: u64,
    words: u64,
    bytes: u64,
}

pub fn run(ctx: &Ctx) -> Result<()> {
    let s = &ctx.settings;
    let up = step::upstream(ctx, shards::STEP, STEP)?;
    let up_path = manifest::manifest_path(&ctx.root, shards::STEP);
    let redo = format!("rerun `lavender-worker {} --force`", shards::STEP);
    let files: HashMap<PathBuf, InputFingerprint> =
        step::upstream_outputs(ctx, &up)?.into_iter().collect();
    let (listed, _) = shards::listed(&up).with_context(|| {
        format!(
            "{} does not list its shards as build_shards writes them; {redo}",
            up_path.display()
        )
    })?;
    let mut by_name: HashMap<&str, &ShardEntry> = HashMap::new();
    for e in &listed {
        if by_name.insert(e.shard.as_str(), e).is_some() {
            bail!(
                "{} lists shard {:?} twice; {redo}",
                up_path.display(),
                e.shard
            );
        }
    }
    let names: Vec<String> = listed.iter().map(|e| e.shard.clone()).collect();
    let chosen = select_shards(&names, s.chunk, s.scale_shards);
    if chosen.is_empty() {
        bail!("{} lists no shards; {redo}", up_path.display());
    }
    // Each chosen shard with the fingerprint of its file, taken as build_shards' output.
    let dir = manifest::step_dir(&ctx.root, shards::STEP);
    let mut read = Vec::with_capacity(chosen.len());
    for name in &chosen {
        let e = by_name[name.as_str()];
        let plain = matches!(
            Path::new(&e.file).components().collect::<Vec<_>>()[..],
            [Component::Normal(_)]
        );
        let path = dir.join(&e.file);
        let Some(fp) = files.get(&path).filter(|_| plain) else {
            bail!(
                "{} gives shard {:?} the file {:?}, which is not a plain file name among its outputs; {redo}",
                up_path.display(),
                e.shard,
                e.file
            );
        };
        read.push((e, path, fp.clone()));
    }
    let inputs: Vec<InputFingerprint> = read.iter().map(|(_, _, f)| f.clone()).collect();
    let slice = json!({ "chunk": s.chunk, "scale": s.scale, "scale_shards": s.scale_shards });
    let config_hash = step::config_hash(STEP, VERSION, &slice);
    if let Some(m) = step::fresh_manifest(ctx, STEP, &config_hash, &inputs)? {
        step::say_skipped(STEP, &m);
        return Ok(());
    }

    let staged = stage::begin(&manifest::step_dir(&ctx.root, STEP))?;
    let total: u64 = inputs.iter().map(|f| f.size).sum();
    let mut progress = Progress::new(STEP, Some(total), "docs");
    let mut per_shard = Vec::with_capacity(read.len());
    for (e, path, fp) in &read {
        let (mut documents, mut words) = (0u64, 0u64);
        read_docs(path, |text, bytes| {
            progress.advance(bytes, 1);
            documents += 1;
            words += text.split_whitespace().count() as u64;
            Ok(())
        })?;
        // What the manifest says must be what is on disk: a shard changed since
        // build_shards wrote it would give counts no later step sees.
        if documents != e.documents || fp.size != e.bytes {
            bail!(
                "{} holds {documents} documents in {} bytes, but {} says {} documents in {} bytes: the shard changed after build_shards wrote it; {redo}",
                path.display(),
                fp.size,
                up_path.display(),
                e.documents,
                e.bytes
            );
        }
        per_shard.push(ShardStats {
            shard: e.shard.clone(),
            documents,
            words,
            bytes: fp.size,
        });
    }
    progress.finish();

    let sizes = per_shard.iter().map(|p| p.bytes);
    let mut m = step::new_manifest(STEP, VERSION, config_hash, inputs);
    for (key, value) in [
        ("documents", per_shard.iter().map(|p| p.documents).sum()),
        ("words", per_shard.iter().map(|p| p.words).sum()),
        ("shards", per_shard.len() as u64),
        ("shard_bytes", sizes.clone().sum()),
        ("shard_bytes_min", sizes.clone().min().unwrap_or(0)),
        ("shard_bytes_max", sizes.max().unwrap_or(0)),
    ] {
        m.counts.insert(key.into(), value);
    }
    m.extra.insert("chunk".into(), json!(s.chunk));
    m.extra.insert("scale".into(), json!(s.scale));
    m.extra.insert("scale_shards".into(), json!(s.scale_shards));
    m.extra.insert("shards".into(), json!(per_shard));
    let line = format!(
        "stats: chunk {} at scale {}: {} documents, {} words in {} shards ({} bytes, {}–{} a shard)",
        s.chunk,
        s.scale,
        group(m.counts["documents"]),
        group(m.counts["words"]),
        per_shard.len(),
        group(m.counts["shard_bytes"]),
        group(m.counts["shard_bytes_min"]),
        group(m.counts["shard_bytes_max"]),
    );
    step::commit(ctx, staged, m)?;
    eprintln!("{line}");
    Ok(())
}
