//! `build_shards`: packs the filtered documents into fixed-size shards
//! (`shards/shard-00000.jsonl` …) and a validation file, split by document hash so the
//! split does not depend on order. `shards/manifest.json` lists every shard with its
//! document count, bytes and sha256, and which shards the configured (chunk, scale) uses.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::documents::{DocWriter, read_docs, unit_hash};
use super::manifest::StepManifest;
use super::stage;
use super::step::{self, Ctx};
use crate::progress::{Progress, group};
use crate::tokens::select_shards;
use lavender::events::Event;

pub const STEP: &str = lavender::pipeline_step::PipelineStep::BuildShards.as_str();
const VERSION: u32 = 1;
pub const VALIDATION: &str = "validation";
/// Salt of the validation split's hash, so it is independent of other hash-based splits.
const SPLIT_SALT: &str = "lavender/validation/";

/// One shard as `shards/manifest.json` lists it (under `"shards"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardEntry {
    pub shard: String,
    pub file: String,
    pub documents: u64,
    pub bytes: u64,
    pub sha256: String,
}

pub fn shard_name(i: usize) -> String {
    format!("shard-{i:05}")
}

/// The shards listed by a build_shards manifest (in order) and the validation file.
pub fn listed(m: &StepManifest) -> Result<(Vec<ShardEntry>, ShardEntry)> {
    let shards: Vec<ShardEntry> =
        serde_json::from_value(m.extra.get("shards").cloned().unwrap_or_default())?;
    let validation: ShardEntry =
        serde_json::from_value(m.extra.get(VALIDATION).cloned().unwrap_or_default())?;
    Ok((shards, validation))
}

pub fn run(ctx: &Ctx) -> Result<()> {
    let s = &ctx.settings;
    let up = step::upstream(ctx, super::filter::STEP, STEP)?;
    let files = step::upstream_outputs(ctx, &up)?;
    let config_hash = step::config_hash(STEP, VERSION, &json!({ "shards": s.data.shards }));
    let inputs: Vec<_> = files.iter().map(|(_, f)| f.clone()).collect();
    if let Some(mut m) = step::fresh_manifest(ctx, STEP, &config_hash, &inputs)? {
        // The selection depends on --chunk/--scale, which do not change the shards.
        record_selection(ctx, &mut m)?;
        step::say_skipped(STEP, &m);
        return Ok(());
    }

    let staged = stage::begin(&ctx.root.join(lavender::data_root::SHARDS))?;
    let mut progress = Progress::new(STEP, Some(step::total_size(&files)), "docs");
    let mut shards: Vec<ShardEntry> = Vec::new();
    let mut current: Option<DocWriter> = None;
    let mut validation = DocWriter::create(&staged.dir().join(format!("{VALIDATION}.jsonl")))?;
    let shard_bytes = s.data.shards.shard_bytes;
    let close = |w: DocWriter, shards: &mut Vec<ShardEntry>| -> Result<()> {
        let (documents, bytes, sha256) = w.finish()?;
        let shard = shard_name(shards.len());
        shards.push(ShardEntry {
            file: format!("{shard}.jsonl"),
            shard,
            documents,
            bytes,
            sha256,
        });
        Ok(())
    };
    for (path, _) in &files {
        read_docs(path, |text, bytes| {
            progress.advance(bytes, 1);
            if unit_hash(text.as_bytes(), SPLIT_SALT) < s.data.shards.validation_fraction {
                return validation.write(text);
            }
            // A shard is full when the next document would take it past shard_bytes.
            if let Some(w) =
                current.take_if(|w| w.bytes() > 0 && w.bytes() + text.len() as u64 > shard_bytes)
            {
                close(w, &mut shards)?;
            }
            if current.is_none() {
                let p = staged
                    .dir()
                    .join(format!("{}.jsonl", shard_name(shards.len())));
                current = Some(DocWriter::create(&p)?);
            }
            current.as_mut().expect("just opened").write(text)
        })?;
    }
    if let Some(w) = current.take() {
        close(w, &mut shards)?;
    }
    progress.finish();
    let (vdocs, vbytes, vsha) = validation.finish()?;
    if shards.is_empty() {
        return Err(s.config_error(
            "data.shards.validation_fraction",
            format!(
                "build_shards: every document went to validation ({}); lower it or add data",
                s.data.shards.validation_fraction
            ),
        ));
    }

    let train_docs: u64 = shards.iter().map(|e| e.documents).sum();
    let mut m = step::new_manifest(STEP, VERSION, config_hash, inputs);
    m.counts.insert("shard_count".into(), shards.len() as u64);
    m.counts.insert("documents".into(), train_docs + vdocs);
    m.counts.insert("train_documents".into(), train_docs);
    m.counts.insert("validation_documents".into(), vdocs);
    m.outputs = shards.iter().map(|e| e.file.clone()).collect();
    m.outputs.push(format!("{VALIDATION}.jsonl"));
    m.extra.insert("shards".into(), json!(shards));
    m.extra.insert(
        VALIDATION.into(),
        json!(ShardEntry {
            shard: VALIDATION.into(),
            file: format!("{VALIDATION}.jsonl"),
            documents: vdocs,
            bytes: vbytes,
            sha256: vsha,
        }),
    );
    selection_into(ctx, &mut m, &shards);
    step::commit(ctx, staged, m)?;
    let used = shards_used(ctx, &shards);
    ctx.event(
        Event::new(
            "dataset_built",
            format!(
                "dataset built: {} shards ({} train documents), {} validation documents; chunk {} at scale {} uses {} of {} shards",
                shards.len(),
                group(train_docs),
                group(vdocs),
                s.chunk,
                s.scale,
                used.len(),
                shards.len()
            ),
        )
        .with("dataset", "shards")
        .with("shard_count", shards.len())
        .with("documents", train_docs + vdocs)
        .with("validation_documents", vdocs)
        .with("shards_used", used.len()),
    )
}

fn shards_used(ctx: &Ctx, shards: &[ShardEntry]) -> Vec<String> {
    let names: Vec<String> = shards.iter().map(|e| e.shard.clone()).collect();
    select_shards(&names, ctx.settings.chunk, ctx.settings.scale_shards)
}

/// Record which shards the configured (chunk, scale) trains on, next to how many exist,
/// so status shows both and a mismatch cannot go unnoticed (build_shards and
/// precompute record it alike).
pub(super) fn selection_into(ctx: &Ctx, m: &mut StepManifest, shards: &[ShardEntry]) {
    let used = shards_used(ctx, shards);
    m.counts.insert("shards_used".into(), used.len() as u64);
    m.counts
        .insert("shards_available".into(), shards.len() as u64);
    m.extra.insert(
        "selection".into(),
        json!({
            "chunk": ctx.settings.chunk,
            "scale": ctx.settings.scale,
            "scale_shards": ctx.settings.scale_shards,
            "shards": used,
        }),
    );
}

fn record_selection(ctx: &Ctx, m: &mut StepManifest) -> Result<()> {
    let before = m.extra.get("selection").cloned();
    let (shards, _) = listed(m)?;
    selection_into(ctx, m, &shards);
    if m.extra.get("selection").cloned() != before {
        super::manifest::write(&ctx.root, m)?;
    }
    Ok(())
}
