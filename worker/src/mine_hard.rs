//! `lavender-worker mine_hard`: score the chunk's training windows with a checkpoint
//! and keep the `top_k` hardest (highest loss) in a new mining directory
//! `<data_root>/hard_examples/chunk<N>-<k>/`, in the files `lavender::hard_examples`
//! describes (its manifest, with the count `hard_examples`, last), then rewrite the
//! summary manifest beside them.

use std::collections::BTreeMap;

use anyhow::Result;
use clap::Args;
use lavender::manifest::{self, StepManifest};
use serde_json::json;
use sha2::{Digest, Sha256};
use tch::Kind;

use crate::cli::StepArgs;
use crate::model::gpt2::cross_entropy_per_row;
use crate::model::load_for_inference;
use crate::progress::Progress;
use crate::tokens::{ArrayWriter, Tokens};
use crate::train::data::PretrainData;
use crate::train::settings::Settings;
use lavender::atomic::StagedDir;
use lavender::hard_examples::{self, LIST_FILE, Mined, STEP, WINDOWS_FILE};

const VERSION: u32 = 1;

#[derive(Args, Debug, Clone)]
pub struct MineHardArgs {
    #[command(flatten)]
    pub step: StepArgs,
    /// Checkpoint directory, run directory, or `latest`.
    #[arg(long, default_value = "latest", value_name = "PATH|latest")]
    pub checkpoint: String,
    /// How many windows to keep (default: data.hard_examples.top_k).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// auto|cpu|cuda|cuda:N|mps.
    #[arg(long)]
    pub device: Option<String>,
}

pub fn run(args: MineHardArgs) -> Result<()> {
    crate::train::runtime::tune();
    let s = Settings::load(&args.step)?;
    if let Some(run_dir) = &args.step.run_dir {
        crate::progress::beat_into(run_dir);
        crate::progress::beat(STEP, 0);
    }
    tch::set_num_threads(s.threads as i32);
    let device =
        crate::train::device::from_flag(args.device.as_deref(), s.config.device, &s.origins)?;
    let (model, ck) =
        load_for_inference(&s.checkpoints_root(), &args.checkpoint, s.model(0)?, device)?;
    let tokens = Tokens::open(&s.data_root.join(lavender::data_root::TOKENS))?;
    let shards = tokens.select_shards(s.chunk, s.config.preset().shards)?;
    let arrays = shards
        .iter()
        .map(|n| tokens.pretrain_shard(n))
        .collect::<Result<Vec<_>>>()?;
    let data = PretrainData::new(arrays, s.seq_len)?;
    let hx = &s.config.data.hard_examples;
    let top_k = args.top_k.unwrap_or(hx.top_k as usize).min(data.len());
    let upsample = hx.upsample.max(1) as usize;

    let _guard = tch::no_grad_guard();
    let mut losses = Vec::with_capacity(data.len());
    let idx: Vec<usize> = (0..data.len()).collect();
    // Scoring is the long part: its progress beats tell the daemon it is alive.
    let mut progress = Progress::new(STEP, None, "windows");
    for chunk in idx.chunks(s.batch_size.max(1) * 4) {
        progress.advance(0, chunk.len() as u64);
        let b = data.batch(chunk, device);
        let per_row = cross_entropy_per_row(&model.forward(&b.input, false), &b.labels);
        losses.extend(Vec::<f64>::try_from(
            per_row.to_kind(Kind::Double).to_device(tch::Device::Cpu),
        )?);
    }
    progress.finish();
    let mut order: Vec<usize> = (0..losses.len()).collect();
    // Hardest first; ties keep corpus order so reruns are identical.
    order.sort_by(|&a, &b| losses[b].total_cmp(&losses[a]).then(a.cmp(&b)));
    order.truncate(top_k);

    // A mining of its own, never written over: built under a hidden name, renamed
    // into place with its manifest, then the summary rewritten.
    hard_examples::move_legacy(&s.data_root)?;
    let target = hard_examples::next_dir(&s.data_root, u64::from(s.chunk))?;
    let staged = StagedDir::begin(&target)?;
    let dir = staged.dir().to_path_buf();
    let bin = dir.join(WINDOWS_FILE);
    let mut w = ArrayWriter::create(&bin, tokens.index.dtype)?;
    let mut listed = Vec::new();
    for (rank, &i) in order.iter().enumerate() {
        let window: Vec<u32> = data.window(i).into_iter().map(|t| t as u32).collect();
        for _ in 0..upsample {
            w.push(&window)?;
        }
        let (a, start) = data.location(i);
        listed
            .push(json!({"rank": rank + 1, "shard": shards[a], "start": start, "loss": losses[i]}));
    }
    let written = w.finish()?;
    lavender::atomic::write_json(
        &dir.join(LIST_FILE),
        &json!({"checkpoint": ck.path, "seq_len": s.seq_len, "upsample": upsample, "windows": listed}),
    )?;

    let mut h = Sha256::new();
    h.update(serde_json::to_vec(
        &json!({"step": STEP, "version": VERSION, "checkpoint": ck.name,
            "top_k": top_k, "upsample": upsample, "seq_len": s.seq_len, "chunk": s.chunk}),
    )?);
    let config_hash: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let mut inputs = vec![manifest::fingerprint(
        &ck.path.join(crate::model::MODEL_FILE),
    )?];
    inputs.push(manifest::fingerprint(
        &tokens.dir().join(crate::tokens::INDEX_FILE),
    )?);
    let scored = losses.len() as u64;
    let m = StepManifest {
        step: STEP.into(),
        version: VERSION,
        config_hash,
        inputs,
        counts: BTreeMap::from([
            ("hard_examples".to_string(), order.len() as u64),
            ("windows_scored".to_string(), scored),
        ]),
        outputs: vec![WINDOWS_FILE.into(), LIST_FILE.into()],
        finished_at: lavender::time::rfc3339_z(lavender::time::now_utc()),
        extra: Mined {
            chunk: u64::from(s.chunk),
            seq_len: s.seq_len as u64,
            upsample: upsample as u64,
        }
        .to_extra(),
    };
    let kept = staged.commit_with(|d| manifest::write_path(&d.join(manifest::FILE), &m))?;
    hard_examples::write_summary(&s.data_root, m.finished_at.clone())?;
    let hardest = order.first().map_or(f64::NAN, |&i| losses[i]);
    let mean = losses.iter().sum::<f64>() / losses.len().max(1) as f64;
    eprintln!(
        "mine_hard: kept {} of {scored} windows from {} (hardest loss {hardest:.3}, mean {mean:.3}); {written} tokens in {}",
        order.len(),
        ck.name,
        kept.join(WINDOWS_FILE).display()
    );
    Ok(())
}
