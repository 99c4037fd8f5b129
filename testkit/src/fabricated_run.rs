//! A fabricated lavender run, as the worker lays it out: config.yaml (with the
//! worker's `momentum` key), tokenizer.json, a dense log_history.json, and
//! checkpoints with model.safetensors, optimizer.safetensors and trainer_state.json.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use chrono::NaiveTime;
use lavender::checkpoint::CheckpointBuilder;
use lavender::checkpoint::CheckpointName;
use lavender::config::Config;
use lavender::trainer_state::TrainerState;
use safetensors::tensor::{Dtype, View};
use serde_json::{Value, json};

pub const VOCAB: usize = 10;
pub const EMBD: usize = 4;
pub const POSITIONS: usize = 8;
pub const RUN_NAME: &str = "run-2026-01-01_00-00-00";

/// The learning rate the fabricated trainer used at `step` (1-based), distinct per
/// step and not a round number, so equality means the exact value was carried.
pub fn lr(step: u64) -> f64 {
    1e-3 * (1.0 + (step as f64 * 0.7).sin()) / 3.0
}

pub struct Owned {
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Owned {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// GPT-2's parameters with one layer, Hugging Face names and Conv1D shapes.
pub fn param_shapes() -> Vec<(String, Vec<usize>)> {
    let e = EMBD;
    let mut v = vec![
        ("transformer.wte.weight".to_string(), vec![VOCAB, e]),
        ("transformer.wpe.weight".to_string(), vec![POSITIONS, e]),
        ("transformer.ln_f.weight".to_string(), vec![e]),
        ("transformer.ln_f.bias".to_string(), vec![e]),
    ];
    for (part, w, b) in [
        ("ln_1", vec![e], vec![e]),
        ("attn.c_attn", vec![e, 3 * e], vec![3 * e]),
        ("attn.c_proj", vec![e, e], vec![e]),
        ("ln_2", vec![e], vec![e]),
        ("mlp.c_fc", vec![e, 4 * e], vec![4 * e]),
        ("mlp.c_proj", vec![4 * e, e], vec![e]),
    ] {
        v.push((format!("transformer.h.0.{part}.weight"), w));
        v.push((format!("transformer.h.0.{part}.bias"), b));
    }
    v
}

/// Bit patterns a lossy copy would change: negative zero, subnormals, NaN payloads.
fn tricky(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .flat_map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bits = match i % 5 {
                0 => 0x8000_0000u32,
                1 => (x as u32) & 0x007F_FFFF,
                2 => 0x7FC0_0000 | ((x as u32) & 0x003F_FFFF),
                _ => f32::to_bits((x % 1000) as f32 * 1e-3),
            };
            bits.to_le_bytes()
        })
        .collect()
}

pub fn write_tensors(path: &Path, tensors: Vec<(String, Owned)>, meta: HashMap<String, String>) {
    let views: Vec<(String, &Owned)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    safetensors::serialize_to_file(views, Some(meta), path).unwrap();
}

pub fn model_tensors(seed: u64) -> Vec<(String, Owned)> {
    param_shapes()
        .into_iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let n: usize = shape.iter().product();
            let data = (0..n)
                .flat_map(|j| (((seed as f32) + (i * 100 + j) as f32) * 1e-3).to_le_bytes())
                .collect();
            (name, Owned { shape, data })
        })
        .collect()
}

pub struct RunSpec {
    pub beta1: f64,
    /// Steps at which checkpoints are saved, in order (a step may repeat).
    pub saves: Vec<(&'static str, u64)>,
    pub with_optimizer: bool,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            beta1: 0.9,
            saves: vec![("pretrain", 2), ("pretrain", 4), ("sft", 6)],
            with_optimizer: true,
        }
    }
}

pub fn config_yaml(beta1: f64) -> String {
    let mut cfg = Config::default();
    cfg.model.n_layer = Some(1);
    cfg.model.n_head = Some(2);
    cfg.model.n_embd = Some(EMBD as u32);
    cfg.model.n_positions = Some(POSITIONS as u32);
    cfg.optimizer.betas = [beta1, 0.999];
    cfg.training.batch_size = 4;
    // What the worker writes: the resolved config plus `momentum` (β1).
    format!("{}\nmomentum: {beta1}\n", cfg.to_yaml().trim_end())
}

fn tokenizer_json() -> Value {
    json!({
        "version": "1.0",
        "added_tokens": [
            {"id": 0, "content": "<|endoftext|>", "special": true, "single_word": false,
             "lstrip": false, "rstrip": false, "normalized": false},
            {"id": 1, "content": "<|pad|>", "special": true, "single_word": false,
             "lstrip": false, "rstrip": false, "normalized": false}
        ],
        "model": {"type": "BPE", "vocab": {}, "merges": []}
    })
}

/// Creates the run under `<root>/checkpoints/` and returns its directory.
pub fn make_run(root: &Path, spec: &RunSpec) -> PathBuf {
    let run = root.join("checkpoints").join(RUN_NAME);
    fs::create_dir_all(&run).unwrap();
    fs::write(run.join("config.yaml"), config_yaml(spec.beta1)).unwrap();
    fs::write(
        run.join("tokenizer.json"),
        serde_json::to_vec_pretty(&tokenizer_json()).unwrap(),
    )
    .unwrap();
    let last = spec.saves.iter().map(|s| s.1).max().unwrap_or(0);
    let mut history = Vec::new();
    for step in 1..=last {
        history.push(
            json!({"step": step, "epoch": step as f64 / 10.0, "learning_rate": lr(step),
            "loss": 3.0 - step as f64 * 0.1, "grad_norm": 1.5, "stage": "pretrain"}),
        );
        if step % 2 == 0 {
            history.push(json!({"step": step, "epoch": step as f64 / 10.0, "eval_loss": 2.9}));
        }
    }
    fs::write(
        run.join("log_history.json"),
        serde_json::to_vec_pretty(&history).unwrap(),
    )
    .unwrap();
    for (i, (stage, step)) in spec.saves.iter().enumerate() {
        save_checkpoint(&run, stage, *step, i as u32 + 1, spec);
    }
    run
}

/// Saves one complete checkpoint through the core library's builder.
pub fn save_checkpoint(
    run: &Path,
    stage: &str,
    step: u64,
    counter: u32,
    spec: &RunSpec,
) -> PathBuf {
    let name = CheckpointName::new(
        stage,
        NaiveTime::from_hms_opt(12, 0, counter % 60).unwrap(),
        counter,
    )
    .unwrap();
    let b = CheckpointBuilder::begin(run, &name).unwrap();
    write_tensors(
        &b.dir().join("model.safetensors"),
        model_tensors(step * 1000 + counter as u64),
        HashMap::from([("format".into(), "pt".into())]),
    );
    if spec.with_optimizer {
        let mut moments = Vec::new();
        for (k, (pname, shape)) in param_shapes().into_iter().enumerate() {
            let n: usize = shape.iter().product();
            for (m, suffix) in ["exp_avg", "exp_avg_sq"].iter().enumerate() {
                let seed = step * 7919 + counter as u64 * 31 + (k * 2 + m) as u64;
                moments.push((
                    format!("{pname}.{suffix}"),
                    Owned {
                        shape: shape.clone(),
                        data: tricky(seed, n),
                    },
                ));
            }
        }
        let meta = HashMap::from([
            ("format".to_string(), "pt".to_string()),
            ("optimizer".to_string(), "adamw".to_string()),
            ("step".to_string(), step.to_string()),
            ("betas".to_string(), format!("[{}, 0.999]", spec.beta1)),
            ("beta1".to_string(), spec.beta1.to_string()),
            ("beta2".to_string(), "0.999".to_string()),
            ("eps".to_string(), "0.00000001".to_string()),
            ("weight_decay".to_string(), "0.1".to_string()),
        ]);
        write_tensors(&b.dir().join("optimizer.safetensors"), moments, meta);
    }
    let mut st = TrainerState::new(stage, step);
    st.total_steps = 6;
    st.lr = lr(step);
    st.epoch = step as f64 / 10.0;
    st.saved_at = format!("2026-01-01T12:00:{:02}.{counter:03}Z", counter % 60);
    st.extra.insert("optimizer_step".into(), json!(step));
    st.extra
        .insert("optimizer_state".into(), json!(spec.with_optimizer));
    b.commit(&st).unwrap()
}

/// The complete checkpoints of a run, oldest first.
pub fn checkpoints(run: &Path) -> Vec<PathBuf> {
    lavender::checkpoint::list_run_checkpoints(run)
        .unwrap()
        .into_iter()
        .map(|c| c.path)
        .collect()
}
