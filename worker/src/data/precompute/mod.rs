//! `precompute`: trains the tokenizer, encodes the shards into token arrays and builds
//! the SFT and DPO sets (see `crate::tokens` for the format it writes).

mod pairs;
pub mod tokenizer;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::documents::{read_docs, unit_hash};
use super::manifest::{StepManifest, fingerprint};
use super::shards::{self, ShardEntry};
use super::stage;
use super::step::{self, Ctx};
use crate::progress::{Progress, group};
use crate::tokens::{
    self, ArrayFile, ArrayWriter, Dtype, PretrainIndex, RecordFile, RecordWriter, ShardFile,
    SplitFiles, TokenIndex,
};
use lavender::events::Event;

pub const STEP: &str = lavender::pipeline_step::PipelineStep::Precompute.as_str();
const VERSION: u32 = 1;
/// Documents (or samples) tokenized per parallel batch.
pub(crate) const BATCH: usize = 2048;
const HELDOUT_SALT: &str = "lavender/heldout/";

pub fn run(ctx: &Ctx) -> Result<()> {
    let s = &ctx.settings;
    let up = step::upstream(ctx, shards::STEP, STEP)?;
    let (shard_list, validation) = shards::listed(&up)?;
    let shard_dir = ctx.root.join(lavender::data_root::SHARDS);
    let mut inputs = Vec::new();
    for (_, fp) in step::upstream_outputs(ctx, &up)? {
        inputs.push(fp);
    }
    let sft_jsonl = s.data.sft_jsonl.as_ref().map(|p| s.config_path(p));
    let dpo_jsonl = s.data.dpo_jsonl.as_ref().map(|p| s.config_path(p));
    let derived_from = if sft_jsonl.is_none() || dpo_jsonl.is_none() {
        let filtered = step::upstream(ctx, super::filter::STEP, STEP)?;
        let (path, fp) = step::upstream_outputs(ctx, &filtered)?
            .into_iter()
            .next()
            .ok_or_else(|| {
                anyhow::anyhow!("the filter manifest lists no output; rerun filter --force")
            })?;
        inputs.push(fp);
        Some(path)
    } else {
        None
    };
    for (key, p) in [
        ("data.sft_jsonl", &sft_jsonl),
        ("data.dpo_jsonl", &dpo_jsonl),
    ] {
        if let Some(p) = p {
            let fp = fingerprint(p).map_err(|e| anyhow::anyhow!("{key}: {e:#}"))?;
            inputs.push(fp);
        }
    }
    let pretrained = s
        .init_from
        .as_deref()
        .map(|dir| {
            crate::model::pretrained::Pretrained::open(dir)
                .map_err(|e| s.config_error("model.init_from", format!("{e:#}")))
        })
        .transpose()?;
    let mut slice = json!({
        "tokenizer": s.data.tokenizer,
        "sft_jsonl": sft_jsonl,
        "dpo_jsonl": dpo_jsonl,
        "heldout_fraction": s.data.heldout_fraction,
        "seed": s.seed,
    });
    // The checkpoint's tokenizer replaces the trained one: its file is an input.
    if let Some(p) = &pretrained {
        slice["tokenizer_from"] = json!(p.tokenizer);
        inputs.push(fingerprint(&p.tokenizer)?);
    }
    let config_hash = step::config_hash(STEP, VERSION, &slice);
    if let Some(mut m) = step::fresh_manifest(ctx, STEP, &config_hash, &inputs)? {
        record_selection(ctx, &mut m)?;
        step::say_skipped(STEP, &m);
        return Ok(());
    }

    let staged = stage::begin(&ctx.root.join(lavender::data_root::TOKENS))?;
    let dir = staged.dir().to_path_buf();

    // Tokenizer: the checkpoint's, copied as it is, or one trained on the shards.
    let trained = match &pretrained {
        Some(p) => {
            let t = tokenizer::pretrained(p)?;
            std::fs::copy(&p.tokenizer, dir.join(tokens::TOKENIZER_FILE))
                .with_context(|| format!("could not copy {}", p.tokenizer.display()))?;
            t
        }
        None => {
            let train_files: Vec<PathBuf> =
                shard_list.iter().map(|e| shard_dir.join(&e.file)).collect();
            eprintln!(
                "precompute: training a byte-level BPE tokenizer (vocabulary {})",
                s.data.tokenizer.vocab_size
            );
            let trained = tokenizer::train(&train_files, &s.data.tokenizer)?;
            tokenizer::save(&trained, &dir.join(tokens::TOKENIZER_FILE))?;
            trained
        }
    };
    ctx.event(
        Event::new(
            "tokenizer_ready",
            format!(
                "tokenizer ready: vocabulary {}{}",
                group(trained.vocab_size as u64),
                pretrained.as_ref().map_or(String::new(), |p| format!(
                    " (model.init_from's, {})",
                    p.dir.display()
                ))
            ),
        )
        .with("vocab_size", trained.vocab_size),
    )?;
    let dtype = Dtype::for_vocab(trained.vocab_size);
    let encoder = match pretrained {
        Some(_) => tokenizer::Encoder::full_pipeline(&trained.tokenizer)?,
        None => tokenizer::Encoder::new(&trained.tokenizer)?,
    };
    let tok = &encoder;
    let eos = trained.eos_id;

    // Pretrain arrays.
    let total: u64 = shard_list.iter().map(|e| e.bytes).sum::<u64>() + validation.bytes;
    let mut progress = Progress::new(STEP, Some(total), "docs");
    let mut shard_files = Vec::new();
    for e in &shard_list {
        let file = format!("pretrain/{}.bin", e.shard);
        let tokens = encode_docs(
            tok,
            eos,
            dtype,
            &shard_dir.join(&e.file),
            &dir.join(&file),
            &mut progress,
        )?;
        shard_files.push(ShardFile {
            shard: e.shard.clone(),
            file,
            tokens,
        });
    }
    let vfile = "pretrain/validation.bin".to_string();
    let vtokens = encode_docs(
        tok,
        eos,
        dtype,
        &shard_dir.join(&validation.file),
        &dir.join(&vfile),
        &mut progress,
    )?;
    progress.finish();
    let train_tokens: u64 = shard_files.iter().map(|f| f.tokens).sum();
    ctx.event(
        Event::new(
            "dataset_built",
            format!(
                "pretrain tokenisation done: {} chunks ({} tokens, {} validation tokens)",
                shard_files.len(),
                group(train_tokens),
                group(vtokens)
            ),
        )
        .with("dataset", "pretrain")
        .with("chunks", shard_files.len())
        .with("tokens", train_tokens)
        .with("validation_tokens", vtokens),
    )?;

    // SFT and DPO.
    let heldout = s.data.heldout_fraction;
    let mut sft = RecordSink::create(&dir, "sft", 2, tok, eos, dtype, heldout)?;
    let mut dpo = RecordSink::create(&dir, "dpo", 3, tok, eos, dtype, heldout)?;
    if let Some(p) = &sft_jsonl {
        pairs::sft_from_jsonl(p, |r| sft.push(r))?;
    }
    if let Some(p) = &dpo_jsonl {
        pairs::dpo_from_jsonl(p, |r| dpo.push(r))?;
    }
    if let Some(docs) = &derived_from {
        let sep_ids = tok.encode_many(vec!["\n\n"])?.remove(0);
        let encode = |texts: Vec<&str>| tok.encode_many(texts);
        let mut on_sft = |r: pairs::Encoded| sft.push_encoded(&r.key, r.parts);
        let mut on_dpo = |r: pairs::Encoded| dpo.push_encoded(&r.key, r.parts);
        pairs::derive(
            docs,
            s.seed,
            pairs::DERIVED_MAX,
            &sep_ids,
            &encode,
            &|key| is_heldout(key, heldout),
            sft_jsonl.is_none().then_some(&mut on_sft as pairs::Sink),
            dpo_jsonl.is_none().then_some(&mut on_dpo as pairs::Sink),
        )?;
    }
    let (sft_files, sft_train, sft_heldout) = sft.finish()?;
    let (dpo_files, dpo_train, dpo_heldout) = dpo.finish()?;
    for (what, n, source) in [
        ("SFT", sft_train, &sft_jsonl),
        ("DPO", dpo_train, &dpo_jsonl),
    ] {
        if n == 0 {
            bail!(
                "precompute: the {what} set has no training samples ({}); add data or lower data.heldout_fraction",
                source
                    .as_ref()
                    .map_or("derived from the corpus".to_string(), |p| p
                        .display()
                        .to_string())
            );
        }
    }
    ctx.event(
        Event::new(
            "dataset_built",
            format!(
                "SFT tokenisation done: {} samples ({} held out)",
                group(sft_train),
                group(sft_heldout)
            ),
        )
        .with("dataset", "sft")
        .with("samples", sft_train)
        .with("heldout", sft_heldout),
    )?;
    ctx.event(
        Event::new(
            "dataset_built",
            format!(
                "DPO tokenisation done: {} pairs ({} held out)",
                group(dpo_train),
                group(dpo_heldout)
            ),
        )
        .with("dataset", "dpo")
        .with("pairs", dpo_train)
        .with("heldout", dpo_heldout),
    )?;

    let index = TokenIndex {
        format: tokens::FORMAT,
        dtype,
        vocab_size: trained.vocab_size,
        bos_id: eos,
        eos_id: eos,
        pad_id: trained.pad_id,
        pretrain: PretrainIndex {
            shards: shard_files,
            validation: ArrayFile {
                file: vfile,
                tokens: vtokens,
            },
        },
        sft: sft_files,
        dpo: dpo_files,
    };
    tokens::write_index(&dir, &index)?;

    let mut m = step::new_manifest(STEP, VERSION, config_hash, inputs);
    m.counts.insert("tokens".into(), train_tokens);
    m.counts.insert("validation_tokens".into(), vtokens);
    m.counts
        .insert("vocab_size".into(), trained.vocab_size as u64);
    m.counts.insert("sft_samples".into(), sft_train);
    m.counts.insert("sft_heldout".into(), sft_heldout);
    m.counts.insert("dpo_pairs".into(), dpo_train);
    m.counts.insert("dpo_heldout".into(), dpo_heldout);
    m.outputs = index_outputs(&index);
    shards::selection_into(ctx, &mut m, &shard_list);
    step::commit(ctx, staged, m)?;
    Ok(())
}

fn index_outputs(index: &TokenIndex) -> Vec<String> {
    let mut out = vec![
        tokens::TOKENIZER_FILE.to_string(),
        tokens::INDEX_FILE.to_string(),
    ];
    out.extend(index.pretrain.shards.iter().map(|s| s.file.clone()));
    out.push(index.pretrain.validation.file.clone());
    for set in [&index.sft, &index.dpo] {
        for r in [&set.train, &set.heldout] {
            out.push(r.file.clone());
            out.push(r.index.clone());
        }
    }
    out
}

/// Tokenize a JSONL document file into one array: each document's ids, then `eos`.
fn encode_docs(
    tok: &tokenizer::Encoder,
    eos: u32,
    dtype: Dtype,
    docs: &Path,
    out: &Path,
    progress: &mut Progress,
) -> Result<u64> {
    let mut w = ArrayWriter::create(out, dtype)?;
    let mut batch: Vec<String> = Vec::with_capacity(BATCH);
    let mut batch_bytes = 0u64;
    let mut flush = |batch: &mut Vec<String>, bytes: &mut u64, w: &mut ArrayWriter| -> Result<()> {
        let ids = tok.encode_many(batch.iter().map(String::as_str).collect())?;
        for mut doc in ids {
            doc.push(eos);
            w.push(&doc)?;
        }
        progress.advance(*bytes, batch.len() as u64);
        batch.clear();
        *bytes = 0;
        Ok(())
    };
    read_docs(docs, |text, bytes| {
        batch.push(text.to_string());
        batch_bytes += bytes;
        if batch.len() >= BATCH {
            flush(&mut batch, &mut batch_bytes, &mut w)?;
        }
        Ok(())
    })?;
    flush(&mut batch, &mut batch_bytes, &mut w)?;
    w.finish()
}

/// Whether the SFT sample or DPO pair whose prompt is `key` belongs to the held-out split.
fn is_heldout(key: &str, fraction: f64) -> bool {
    unit_hash(key.as_bytes(), HELDOUT_SALT) < fraction
}

/// Collects SFT samples or DPO pairs, tokenizes them in batches and writes the train and
/// held-out record files. Every part after the prompt ends with `eos`, so the model
/// learns where a response stops.
struct RecordSink<'t> {
    tok: &'t tokenizer::Encoder<'t>,
    eos: u32,
    heldout_fraction: f64,
    files: SplitFiles,
    train: RecordWriter,
    heldout: RecordWriter,
    pending: Vec<Vec<String>>,
}

impl<'t> RecordSink<'t> {
    fn create(
        dir: &Path,
        kind: &str,
        parts: usize,
        tok: &'t tokenizer::Encoder<'t>,
        eos: u32,
        dtype: Dtype,
        heldout_fraction: f64,
    ) -> Result<RecordSink<'t>> {
        let file = |split: &str| RecordFile {
            file: format!("{kind}/{split}.bin"),
            index: format!("{kind}/{split}.idx"),
            count: 0,
        };
        let files = SplitFiles {
            train: file("train"),
            heldout: file("heldout"),
        };
        let open = |f: &RecordFile| {
            RecordWriter::create(&dir.join(&f.file), &dir.join(&f.index), dtype, parts)
        };
        Ok(RecordSink {
            train: open(&files.train)?,
            heldout: open(&files.heldout)?,
            files,
            tok,
            eos,
            heldout_fraction,
            pending: Vec::with_capacity(BATCH),
        })
    }

    fn push(&mut self, record: Vec<String>) -> Result<()> {
        self.pending.push(record);
        if self.pending.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let texts: Vec<&str> = self.pending.iter().flatten().map(String::as_str).collect();
        let mut ids = self.tok.encode_many(texts)?.into_iter();
        let pending = std::mem::take(&mut self.pending);
        for record in pending {
            let parts = (0..record.len())
                .map(|_| ids.next().expect("one encoding per text"))
                .collect();
            self.push_encoded(&record[0], parts)?;
        }
        Ok(())
    }

    /// Write one record to the split `key` (its prompt's text) hashes to.
    fn push_encoded(&mut self, key: &str, mut parts: Vec<Vec<u32>>) -> Result<()> {
        for p in parts.iter_mut().skip(1) {
            p.push(self.eos);
        }
        let refs: Vec<&[u32]> = parts.iter().map(Vec::as_slice).collect();
        if is_heldout(key, self.heldout_fraction) {
            self.heldout.push(&refs)
        } else {
            self.train.push(&refs)
        }
    }

    /// Returns the index entries and the train / held-out counts.
    fn finish(mut self) -> Result<(SplitFiles, u64, u64)> {
        self.flush()?;
        let mut files = self.files;
        files.train.count = self.train.finish()?;
        files.heldout.count = self.heldout.finish()?;
        let (t, h) = (files.train.count, files.heldout.count);
        Ok((files, t, h))
    }
}

/// A skipped precompute still records the selection of this run's (chunk, scale).
fn record_selection(ctx: &Ctx, m: &mut StepManifest) -> Result<()> {
    let index = tokens::Tokens::open(&ctx.root.join(lavender::data_root::TOKENS))?.index;
    let entries: Vec<ShardEntry> = index
        .pretrain
        .shards
        .iter()
        .map(|s| ShardEntry {
            shard: s.shard.clone(),
            file: s.file.clone(),
            documents: 0,
            bytes: 0,
            sha256: String::new(),
        })
        .collect();
    let before = m.extra.get("selection").cloned();
    shards::selection_into(ctx, m, &entries);
    if m.extra.get("selection").cloned() != before {
        super::manifest::write(&ctx.root, m)?;
    }
    Ok(())
}
