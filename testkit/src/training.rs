//! The trainer run as the real worker binary: a synthetic `tokens/` directory in the
//! precompute format (see worker/src/tokens.rs), short runs, and reads of what they save.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

pub const VOCAB: u32 = 64;
const EOS: u32 = 0;

pub fn worker() -> Command {
    Command::new(crate::bins::worker())
}

/// A tiny, learnable corpus: a noisy cycle `t → (5t + 3) mod 61 + 1`, so loss can
/// fall far below uniform; SFT answers repeat the prompt's last token pattern; DPO
/// prefers the cycle's continuation over noise.
/// `lavender-worker train` on the CPU over `data_root`; the caller adds the rest.
pub fn cpu_train(data_root: &Path) -> Command {
    let mut c = worker();
    c.arg("train")
        .arg("--data-root")
        .arg(data_root)
        .args(["--device", "cpu"]);
    c
}

pub fn write_tokens(data_root: &Path) {
    let dir = data_root.join("tokens");
    fs::create_dir_all(dir.join("pretrain")).unwrap();
    fs::create_dir_all(dir.join("sft")).unwrap();
    fs::create_dir_all(dir.join("dpo")).unwrap();
    let mut rng = 0x1234_5678u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let succ = |t: u32| (5 * t + 3) % 61 + 1;
    let stream = |n: usize, next: &mut dyn FnMut() -> u64| -> Vec<u32> {
        let mut v = Vec::with_capacity(n);
        let mut t = 1 + (next() % 60) as u32;
        for _ in 0..n {
            v.push(t);
            t = if next().is_multiple_of(10) {
                1 + (next() % 62) as u32
            } else {
                succ(t)
            };
        }
        v
    };
    let mut shards = Vec::new();
    for i in 0..4 {
        let toks = stream(6000, &mut next);
        let file = format!("pretrain/shard-{i:05}.bin");
        write_u16(&dir.join(&file), &toks);
        shards.push(json!({"shard": format!("shard-{i:05}"), "file": file, "tokens": toks.len()}));
    }
    let val = stream(3000, &mut next);
    write_u16(&dir.join("pretrain/validation.bin"), &val);

    let records = |kind: &str, split: &str, n: usize, next: &mut dyn FnMut() -> u64| -> Value {
        let mut data = Vec::new();
        let mut idx = Vec::new();
        for _ in 0..n {
            let start = 1 + (next() % 60) as u32;
            let mut prompt = vec![start];
            for _ in 0..5 {
                let last = *prompt.last().unwrap();
                prompt.push(succ(last));
            }
            let mut cont = vec![succ(*prompt.last().unwrap())];
            for _ in 0..5 {
                let last = *cont.last().unwrap();
                cont.push(succ(last));
            }
            let noise: Vec<u32> = (0..6).map(|_| 1 + (next() % 62) as u32).collect();
            let parts: Vec<&[u32]> = if kind == "sft" {
                vec![&prompt, &cont]
            } else {
                vec![&prompt, &cont, &noise]
            };
            let mut rec = vec![data.len() as u64];
            for p in &parts {
                rec.push(p.len() as u64);
                data.extend_from_slice(p);
            }
            idx.extend(rec.iter().flat_map(|w| w.to_le_bytes()));
        }
        let file = format!("{kind}/{split}.bin");
        let index = format!("{kind}/{split}.idx");
        write_u16(&dir.join(&file), &data);
        fs::write(dir.join(&index), idx).unwrap();
        json!({"file": file, "index": index, "count": n})
    };
    let sft_train = records("sft", "train", 200, &mut next);
    let sft_held = records("sft", "heldout", 32, &mut next);
    let dpo_train = records("dpo", "train", 200, &mut next);
    let dpo_held = records("dpo", "heldout", 32, &mut next);
    let index = json!({
        "format": 1, "dtype": "u16", "vocab_size": VOCAB, "bos_id": EOS, "eos_id": EOS, "pad_id": EOS,
        "pretrain": {"shards": shards, "validation": {"file": "pretrain/validation.bin", "tokens": val.len()}},
        "sft": {"train": sft_train, "heldout": sft_held},
        "dpo": {"train": dpo_train, "heldout": dpo_held},
    });
    fs::write(
        dir.join("index.json"),
        serde_json::to_vec_pretty(&index).unwrap(),
    )
    .unwrap();
    fs::write(
        dir.join("tokenizer.json"),
        word_level_tokenizer().to_string(),
    )
    .unwrap();
}

/// Replaces the held-out pretraining split of `write_tokens`'s data with `tokens`
/// tokens of the same noisy cycle (a larger split makes evaluating take longer).
pub fn write_validation(data_root: &Path, tokens: usize) {
    let dir = data_root.join("tokens");
    let succ = |t: u32| (5 * t + 3) % 61 + 1;
    let mut rng = 0x9e37_79b9u64;
    let mut t = 1;
    let toks: Vec<u32> = (0..tokens)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            t = if rng.is_multiple_of(10) {
                1 + ((rng >> 8) % 62) as u32
            } else {
                succ(t)
            };
            t
        })
        .collect();
    write_u16(&dir.join("pretrain/validation.bin"), &toks);
    let index_path = dir.join("index.json");
    let mut index: Value = serde_json::from_slice(&fs::read(&index_path).unwrap()).unwrap();
    index["pretrain"]["validation"]["tokens"] = json!(tokens);
    fs::write(&index_path, serde_json::to_vec_pretty(&index).unwrap()).unwrap();
}

/// Scrambles the text that pretraining's steps `steps` of chunk 1 draw (every
/// window of their batches: `per_step` = batch_size × grad_accum windows of
/// `seq_len` tokens each, in the order `lavender::data_order` gives for `seed`), in
/// `write_tokens`'s data: a corrupted passage of the corpus that a model which
/// learnt the rest predicts badly. Its loss spikes at exactly those steps, and a
/// run that skips their batches never sees it. Returns how many windows it wrote.
pub fn poison_pretraining_steps(
    data_root: &Path,
    seed: u64,
    seq_len: usize,
    per_step: usize,
    steps: std::ops::RangeInclusive<u64>,
) -> usize {
    let dir = data_root.join("tokens");
    let index: Value = serde_json::from_slice(&fs::read(dir.join("index.json")).unwrap()).unwrap();
    // Chunk 1 of write_tokens' four shards trains on the first.
    let shard = &index["pretrain"]["shards"][0];
    let file = dir.join(shard["file"].as_str().unwrap());
    let mut bytes = fs::read(&file).unwrap();
    let tokens = bytes.len() / 2;
    // The worker's windows: seq_len + 1 tokens every seq_len, while one fits.
    let windows = (tokens - seq_len - 1) / seq_len + 1;
    let order = lavender::data_order::epoch_order(windows, seed, "pretrain", 0);
    let mut rng = lavender::data_order::SplitMix64::new(seed ^ 0x0bad_5eed);
    let mut written = 0;
    for step in steps {
        let first = (step as usize - 1) * per_step;
        for &w in &order[first..first + per_step] {
            // The window's tokens after its first: what it is trained to predict.
            for t in w as usize * seq_len + 1..=w as usize * seq_len + seq_len {
                let token = 1 + rng.below(u64::from(VOCAB) - 1) as u16;
                bytes[2 * t..2 * t + 2].copy_from_slice(&token.to_le_bytes());
            }
            written += 1;
        }
    }
    fs::write(&file, bytes).unwrap();
    written
}

fn write_u16(path: &Path, toks: &[u32]) {
    let bytes: Vec<u8> = toks
        .iter()
        .flat_map(|&t| (t as u16).to_le_bytes())
        .collect();
    fs::write(path, bytes).unwrap();
}

/// Settings for a run of a few seconds: a very small model and short stages.
pub fn small_run_args(pretrain: u64, sft: u64, dpo: u64, every: u64) -> Vec<String> {
    let stages = format!(
        "[{{name: pretrain, steps: {pretrain}, lr: 3.0e-3, checkpoint_every: {every}}}, \
          {{name: sft, steps: {sft}, lr: 1.0e-3, checkpoint_every: {every}}}, \
          {{name: dpo, steps: {dpo}, lr: 5.0e-4, checkpoint_every: {every}, beta: 0.1}}]"
    );
    let sets = [
        "model.n_layer=1".to_string(),
        "model.n_head=2".into(),
        "model.n_embd=32".into(),
        "model.n_positions=32".into(),
        "model.dropout=0.1".into(),
        "training.batch_size=4".into(),
        "training.seq_len=16".into(),
        "training.log_every=1".into(),
        "training.eval_every=5".into(),
        "training.eval_batches=2".into(),
        "training.keep_checkpoints=3".into(),
        "optimizer.warmup_steps=2".into(),
        "threads=1".into(),
        format!("training.stages={stages}"),
    ];
    sets.iter()
        .flat_map(|s| ["--set".to_string(), s.clone()])
        .collect()
}

/// With `small_run_args`: a learning rate at which the model learns
/// `write_tokens`' cycle within 60 steps (so a corrupted passage stands out), and
/// the divergence rule over the last 20 steps, a spike lasting 2 steps.
pub fn spiking_run_args() -> Vec<String> {
    [
        "training.stages[0].lr=1.0e-2",
        "training.spike.window=20",
        "training.spike.patience=2",
    ]
    .iter()
    .flat_map(|s| ["--set".to_string(), s.to_string()])
    .collect()
}

/// With `small_run_args`: a pretraining learning rate so high that every attempt
/// diverges within a few steps (weight decay alone multiplies the weights by
/// lr × weight_decay each step).
pub fn diverging_run_args() -> Vec<String> {
    vec!["--set".into(), "training.stages[0].lr=1.0e3".into()]
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{} {:?} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        Path::new(cmd.get_program()).display(),
        cmd.get_args().collect::<Vec<_>>(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The complete checkpoints of a run directory, oldest first (by counter). A save still under its hidden
/// temporary name is not one, even once its marker is written: a kill before the
/// rename leaves exactly that.
pub fn checkpoints(run_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(run_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .filter(|p| lavender::checkpoint::is_complete(p))
        .collect();
    v.sort_by_key(|p| counter(p));
    v
}

fn counter(p: &Path) -> u32 {
    let name = p.file_name().unwrap().to_string_lossy().into_owned();
    name.rsplit('-').next().unwrap().parse().unwrap()
}

/// A real `tokenizers` file for the synthetic vocabulary: token `i` is the word `w<i>`.
fn word_level_tokenizer() -> Value {
    let vocab: serde_json::Map<String, Value> =
        (0..VOCAB).map(|i| (format!("w{i}"), json!(i))).collect();
    json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"}
    })
}

/// The one-layer model of the real worker's daemon tests (a YAML flow map).
pub const SMALL_MODEL: &str = "{n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, dropout: 0.0, layer_norm_epsilon: 1.0e-5}";

/// A daemon config that runs the real worker `worker` on the train step alone, on the
/// synthetic tokens of [`write_tokens`]: a heartbeat every step, the daemon's test
/// timings; the rest is the test's.
pub struct TrainOnly<'a> {
    pub worker: &'a str,
    /// `model:` (a YAML flow map, e.g. [`SMALL_MODEL`]).
    pub model: &'a str,
    pub keep_checkpoints: u32,
    /// The lines of `training.stages` (each `    - {…}`).
    pub stages: &'a str,
    /// More `supervisor:` keys (each indented two spaces), or nothing.
    pub supervisor: &'a str,
    /// More `notify:` keys (each indented two spaces), or nothing.
    pub notify: &'a str,
    /// Top-level sections after the rest, or nothing.
    pub extra: &'a str,
}

/// `yaml` (a [`TrainOnly`] of `worker`) with `worker.command` a shell running
/// `script`, which gets the daemon's arguments as `"$@"` (e.g. `exec WORKER "$@"
/// --hang-at-step 25`).
pub fn shell_worker(yaml: &str, worker: &str, script: &str) -> String {
    yaml.replace(
        &format!(r#"command: ["{worker}"]"#),
        &format!("command: {}", json!(["/bin/sh", "-c", script, "sh"])),
    )
}

impl TrainOnly<'_> {
    pub fn yaml(&self) -> String {
        let TrainOnly {
            worker,
            model,
            keep_checkpoints,
            stages,
            supervisor,
            notify,
            extra,
        } = self;
        format!(
            r#"steps: [train]
device: cpu
threads: 1
worker:
  command: ["{worker}"]
model: {model}
optimizer: {{warmup_steps: 2}}
training:
  batch_size: 4
  seq_len: 16
  log_every: 1
  eval_every: 1000
  eval_batches: 1
  keep_checkpoints: {keep_checkpoints}
  stages:
{stages}
supervisor:
  listen: 127.0.0.1:0
  poll_interval_ms: 50
  stop_timeout_s: 60
{supervisor}
notify:
  desktop: false
{notify}
{extra}"#
        )
    }
}
