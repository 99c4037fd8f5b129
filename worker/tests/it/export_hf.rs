//! Train a tiny model with the real pipeline (data steps on a small corpus, then
//! `train`), export it with `lavender_export`, and load the export with Hugging
//! Face `transformers` in the project's .venv: same logits as the tch model, text
//! from `pipeline("text-generation")`, the tokenizer's ids, the per-step learning
//! rates and moments. Installs `transformers` into .venv when missing
//! (scripts/hf-setup.sh) and prints the versions used.

use lavender::pipeline_step::{PipelineStep, names_through};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use lavender_export::{self as export, ExportOptions, ExportStatus, ResolveOptions, Selection};
use lavender_testkit::read_json;
use lavender_testkit::training::{run_ok, worker};
use serde_json::Value;

const BETA1: f64 = 0.95;
const PROMPT: &str = "The king speaks";
const IDS: [i64; 8] = [0, 5, 17, 42, 100, 250, 299, 3];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    std::env::var_os("LAVENDER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"))
}

/// Speeches separated by blank lines, like the embedded corpus, but small enough
/// that tokenizer training takes a moment.
fn write_corpus(path: &Path) {
    let words = [
        "the", "a", "river", "stone", "light", "of", "and", "to", "in", "king", "queen", "speaks",
        "gentle", "storm", "night", "morning", "sword", "crown", "love", "fear", "hope", "bright",
        "dark", "over", "under", "city", "field", "house", "sea", "ship", "wind", "fire",
    ];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let mut text = String::new();
    for i in 0..600 {
        text.push_str(&format!("SPEAKER{}:\n", i % 7));
        for _ in 0..2 + next(3) {
            let n = 5 + next(8);
            let sentence: Vec<&str> = (0..n).map(|_| words[next(words.len())]).collect();
            let s = sentence.join(" ");
            text.push_str(&s[..1].to_uppercase());
            text.push_str(&s[1..]);
            text.push_str(". ");
        }
        text.push_str("\n\n");
    }
    fs::write(path, text).unwrap();
}

fn step_cmd(step: &str, data_root: &Path, corpus: &Path) -> Command {
    let mut c = worker();
    c.arg(step)
        .arg("--data-root")
        .arg(data_root)
        .args(["--scale", "tiny"])
        .env_remove("LAVENDER_CONFIG")
        .env_remove("LAVENDER_DATA_ROOT")
        .env_remove("LAVENDER_RUN_DIR");
    for set in [
        format!("data.sources=[{{path: {}}}]", corpus.display()),
        "data.tokenizer.vocab_size=300".to_string(),
        "data.shards.shard_bytes=8192".to_string(),
    ] {
        c.arg("--set").arg(set);
    }
    c
}

fn train(data_root: &Path, corpus: &Path, run_dir: &Path) {
    let stages = "[{name: pretrain, steps: 6, lr: 3.0e-3, checkpoint_every: 3}, \
                  {name: sft, steps: 2, lr: 1.0e-3, checkpoint_every: 2}, \
                  {name: dpo, steps: 2, lr: 5.0e-4, checkpoint_every: 2, beta: 0.1}]";
    let mut c = step_cmd("train", data_root, corpus);
    c.arg("--run-dir").arg(run_dir).args(["--device", "cpu"]);
    for set in [
        "model.n_layer=2",
        "model.n_head=2",
        "model.n_embd=32",
        "model.n_positions=32",
        "model.dropout=0.1",
        "training.batch_size=4",
        "training.seq_len=16",
        "training.eval_every=5",
        "training.eval_batches=1",
        "training.keep_checkpoints=10",
        "training.save_optimizer_state=all",
        "optimizer.warmup_steps=2",
        &format!("optimizer.betas=[{BETA1}, 0.99]"),
        "threads=1",
        &format!("training.stages={stages}"),
    ] {
        c.arg("--set").arg(set);
    }
    run_ok(&mut c);
}

fn logits_of(checkpoint: &Path) -> Vec<Vec<f64>> {
    let ids: Vec<String> = IDS.iter().map(i64::to_string).collect();
    let out = run_ok(
        worker()
            .arg("logits")
            .arg("--checkpoint")
            .arg(checkpoint)
            .arg("--ids")
            .arg(ids.join(",")),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    matrix(&v["logits"])
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

fn max_abs_diff(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f64::max)
}

#[test]
fn an_exported_checkpoint_loads_in_transformers_with_the_same_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let data_root = tmp.path().join("data");
    let corpus = tmp.path().join("corpus.txt");
    write_corpus(&corpus);
    for step in names_through(PipelineStep::Precompute) {
        run_ok(&mut step_cmd(step, &data_root, &corpus));
    }
    let run_dir = data_root.join("checkpoints/run-2026-01-01_00-00-00");
    train(&data_root, &corpus, &run_dir);

    let report = export::export(&ExportOptions {
        selection: Selection::All,
        ..ExportOptions::new(&run_dir)
    })
    .unwrap();
    print!("{}", export::export_text(&report));
    let written: Vec<_> = report
        .checkpoints
        .iter()
        .filter(|c| c.status == ExportStatus::Written)
        .collect();
    let steps: Vec<u64> = written.iter().map(|c| c.step).collect();
    assert_eq!(
        steps,
        [3, 6, 8, 10],
        "the last stage ends in the final checkpoint"
    );

    // The moments of each checkpoint, bitwise.
    for c in &written {
        let exported = c.path.as_ref().unwrap().join("optimizer.safetensors");
        assert_eq!(
            fs::read(&exported).unwrap(),
            fs::read(c.source.join("optimizer.safetensors")).unwrap(),
            "{}",
            exported.display()
        );
    }

    // The trainer's per-step learning rates, as the worker recorded them (training
    // entries: those with a loss); every entry, evaluations too, carries its step's.
    let history = read_json(&run_dir.join("log_history.json"));
    let entries = history.as_array().unwrap();
    let trainer_lrs: Vec<(u64, f64)> = entries
        .iter()
        .filter(|e| e.get("loss").is_some())
        .filter_map(|e| Some((e["step"].as_u64()?, e["learning_rate"].as_f64()?)))
        .collect();
    let every_lr: Vec<(u64, f64)> = entries
        .iter()
        .map(|e| {
            (
                e["step"].as_u64().unwrap(),
                e["learning_rate"].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(
        every_lr.len() > trainer_lrs.len(),
        "evaluations are in the history"
    );
    assert_eq!(
        trainer_lrs.iter().map(|e| e.0).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<u64>>()
    );

    // transformers in .venv: installed when missing, versions printed.
    let setup = Command::new("bash")
        .arg(repo().join("scripts/hf-setup.sh"))
        .output()
        .unwrap();
    assert!(
        setup.status.success(),
        "scripts/hf-setup.sh failed:\n{}",
        String::from_utf8_lossy(&setup.stderr)
    );
    println!(
        "versions: {}",
        String::from_utf8_lossy(&setup.stdout).trim()
    );

    let last = written.last().unwrap();
    let export_dir = last.path.clone().unwrap();
    let ids: Vec<String> = IDS.iter().map(i64::to_string).collect();
    let out = Command::new(python())
        .arg(repo().join("scripts/hf_check.py"))
        .arg("--model")
        .arg(&export_dir)
        .arg("--ids")
        .arg(ids.join(","))
        .arg("--text")
        .arg(PROMPT)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hf_check.py failed:\n{stderr}");
    let hf: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "hf_check.py printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    println!("hf_check: {}", hf["versions"]);

    // Logits: the tch model on the original checkpoint vs. GPT2LMHeadModel on the export.
    let tch_logits = logits_of(&last.source);
    let hf_logits = matrix(&hf["logits"]);
    let diff = max_abs_diff(&tch_logits, &hf_logits);
    let spread = tch_logits
        .iter()
        .flatten()
        .fold(0.0f64, |m, x| m.max(x.abs()));
    println!("max |logits(tch) - logits(transformers)| = {diff:e} (max |logit| {spread:.3})");
    assert!(diff <= 1e-4, "logits differ by {diff}");
    assert!(spread > 1e-2, "degenerate logits: {spread}");
    // The export's config.json describes the same model to lavender too.
    assert_eq!(logits_of(&export_dir), tch_logits);

    assert_eq!(hf["lm_head_tied"], true);
    assert_eq!(hf["unexpected_keys"], serde_json::json!([]));
    assert!(
        hf["missing_keys"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k == "lm_head.weight"),
        "{}",
        hf["missing_keys"]
    );
    assert_eq!(hf["model_metadata"], serde_json::json!({"format": "pt"}));

    // Tokenizer: AutoTokenizer gives lavender's ids and decodes back exactly.
    let tok = tokenizers::Tokenizer::from_file(run_dir.join("tokenizer.json")).unwrap();
    let ours: Vec<u64> = tok
        .encode(PROMPT, false)
        .unwrap()
        .get_ids()
        .iter()
        .map(|&i| i as u64)
        .collect();
    let theirs: Vec<u64> = hf["text_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(theirs, ours, "tokenizer class {}", hf["tokenizer_class"]);
    assert_eq!(hf["decoded"], PROMPT);

    // pipeline("text-generation") continues the prompt.
    let generated = hf["generated_text"].as_str().unwrap();
    println!("generated: {generated:?}");
    assert!(
        generated.starts_with(PROMPT) && generated.len() > PROMPT.len(),
        "{generated:?}"
    );

    // TrainerState.load_from_json reads the state; its LRs are the trainer's.
    assert_eq!(hf["global_step"], 10);
    assert_eq!(hf["trainer_state_keys_sorted"], true);
    let hf_lrs: Vec<(u64, f64)> = hf["learning_rates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e[0].as_u64().unwrap(), e[1].as_f64().unwrap()))
        .collect();
    assert_eq!(hf_lrs, every_lr);
    let meta = &hf["optimizer_metadata"];
    assert_eq!(meta["step"], "10");
    assert_eq!(meta["betas"], format!("[{BETA1}, 0.99]"));
    assert!(meta["eps"].is_string() && meta["weight_decay"].is_string());

    // resolve on the exports: SOURCE's momentum is 0.0 for AdamW (not β1), the
    // trainer's own per-step rates, lr×steps per segment their sums.
    let ckpts: Vec<PathBuf> = written.iter().map(|c| c.path.clone().unwrap()).collect();
    let r = export::resolve(&ResolveOptions {
        checkpoints: ckpts.clone(),
        ..ResolveOptions::default()
    })
    .unwrap();
    print!("{}", export::resolve_yaml(&r));
    assert_eq!(r.momentum, Some(0.0));
    assert_eq!(r.use_adam_preconditioner, Some(true));
    assert_eq!(r.model_path.as_ref(), Some(&export_dir));
    let lrs: Vec<f64> = trainer_lrs.iter().map(|e| e.1).collect();
    assert_eq!(r.step_lrs.as_ref(), Some(&lrs));
    for s in r.segment_details.unwrap() {
        let sum: f64 = lrs[s.from_step as usize..s.to_step as usize].iter().sum();
        assert!((s.lr_x_steps - sum).abs() <= 1e-12 * sum, "{s:?} vs {sum}");
    }
}

/// A GPT-2 and its tokenizer as a user brings them: a byte-level BPE trained by
/// `tokenizers` on the corpus, a `GPT2LMHeadModel` (vocabulary padded past the
/// tokenizer's) saved with `save_pretrained` into `gpt2/`, and the same model as a
/// `torch.save` state dict (`pytorch_model.bin`) in `gpt2-bin/`.
const MAKE_GPT2: &str = r#"
import os, sys, torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel
out, corpus = sys.argv[1], sys.argv[2]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([corpus], trainers.BpeTrainer(vocab_size=350, special_tokens=["<|endoftext|>"],
                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
torch.manual_seed(0)
eos = tok.token_to_id("<|endoftext|>")
cfg = GPT2Config(vocab_size=tok.get_vocab_size() + 6, n_positions=64, n_embd=32, n_layer=2,
                 n_head=2, bos_token_id=eos, eos_token_id=eos)
model = GPT2LMHeadModel(cfg)
for sub in ["gpt2", "gpt2-bin"]:
    d = os.path.join(out, sub)
    model.save_pretrained(d)
    tok.save(os.path.join(d, "tokenizer.json"))
os.remove(os.path.join(out, "gpt2-bin", "model.safetensors"))
torch.save(model.state_dict(), os.path.join(out, "gpt2-bin", "pytorch_model.bin"))
print(tok.get_vocab_size())
"#;

/// One tensor of a safetensors file, as f32 values.
fn tensor_values(path: &Path, name: &str) -> Vec<f32> {
    let bytes = fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), safetensors::Dtype::F32, "{name}");
    t.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn a_pretrained_gpt2_continues_through_sft_and_exports_with_the_same_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let data_root = tmp.path().join("data");
    let corpus = tmp.path().join("corpus.txt");
    write_corpus(&corpus);
    lavender_testkit::python::require_modules(&["transformers", "tokenizers", "torch"]);
    let out = run_ok(
        Command::new(python())
            .arg("-c")
            .arg(MAKE_GPT2)
            .arg(tmp.path())
            .arg(&corpus)
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1"),
    );
    let tokenizer_size: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let gpt2 = tmp.path().join("gpt2");
    let init = |dir: &Path| format!("model.init_from={}", dir.display());

    // The tokenizer step takes the checkpoint's tokenizer as it is.
    for step in names_through(PipelineStep::Precompute) {
        run_ok(step_cmd(step, &data_root, &corpus).args(["--set", &init(&gpt2)]));
    }
    assert_eq!(
        fs::read(data_root.join("tokens/tokenizer.json")).unwrap(),
        fs::read(gpt2.join("tokenizer.json")).unwrap()
    );
    let m = read_json(&data_root.join("tokens/manifest.json"));
    assert_eq!(m["counts"]["vocab_size"], tokenizer_size);

    // SFT from its weights, once from model.safetensors and once from pytorch_model.bin.
    let sft = |from: &Path, run: &str| -> PathBuf {
        let run_dir = data_root.join("checkpoints").join(run);
        let mut c = step_cmd("train", &data_root, &corpus);
        c.arg("--run-dir").arg(&run_dir).args(["--device", "cpu"]);
        for set in [
            init(from).as_str(),
            "training.stages=[{name: sft, steps: 4, lr: 1.0e-3, checkpoint_every: 2}]",
            "training.batch_size=4",
            "training.seq_len=32",
            "training.eval_every=2",
            "training.eval_batches=1",
            "threads=1",
        ] {
            c.arg("--set").arg(set);
        }
        run_ok(&mut c);
        run_dir
    };
    let run = sft(&gpt2, "run-2026-01-01_00-00-00");
    let run_bin = sft(&tmp.path().join("gpt2-bin"), "run-2026-01-01_00-00-01");
    let started = lavender_testkit::events(&run)
        .into_iter()
        .find(|e| e["kind"] == "run_started")
        .unwrap();
    assert_eq!(started["init_from"], gpt2.display().to_string());
    assert_eq!(
        started["model"]["n_positions"], 64,
        "the checkpoint's shape"
    );
    let last = |run: &Path| {
        let cks = lavender::checkpoint::list_run_checkpoints(run).unwrap();
        assert_eq!(cks.last().unwrap().state.step, 4);
        cks.last().unwrap().path.clone()
    };
    let (ck, ck_bin) = (last(&run), last(&run_bin));
    assert_eq!(
        logits_of(&ck),
        logits_of(&ck_bin),
        "both files hold the same weights"
    );
    // Training moved the checkpoint's weights a little (4 AdamW steps of 1e-3), where a
    // fresh initialisation would be unrelated to them.
    let name = "transformer.h.0.mlp.c_fc.weight";
    let before = tensor_values(&gpt2.join("model.safetensors"), name);
    let after = tensor_values(&ck.join("model.safetensors"), name);
    let moved = before
        .iter()
        .zip(&after)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(moved > 0.0 && moved < 0.01, "max change {moved}");

    // `lavenderd export`, then transformers loads it: same logits as the worker's.
    let export: Value = serde_json::from_slice(
        &run_ok(
            Command::new(lavender_testkit::lavenderd())
                .arg("--data-root")
                .arg(&data_root)
                .args(["export", "--run"])
                .arg(&run)
                .args(["--all", "--json"])
                .env_remove("LAVENDER_CONFIG")
                .env_remove("LAVENDER_DATA_ROOT"),
        )
        .stdout,
    )
    .unwrap();
    let exported = export["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "written")
        .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
        .next_back()
        .expect("an exported checkpoint");
    let ids: Vec<String> = IDS.iter().map(i64::to_string).collect();
    let out = run_ok(
        Command::new(python())
            .arg(repo().join("scripts/hf_check.py"))
            .arg("--model")
            .arg(&exported)
            .arg("--ids")
            .arg(ids.join(","))
            .arg("--text")
            .arg(PROMPT)
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1"),
    );
    let hf: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tch_logits = logits_of(&ck);
    let diff = max_abs_diff(&tch_logits, &matrix(&hf["logits"]));
    println!("init_from -> sft -> export: max |logits(worker) - logits(transformers)| = {diff:e}");
    assert!(diff <= 1e-4, "logits differ by {diff}");
    assert_eq!(
        tch_logits[0].len() as u64,
        tokenizer_size + 6,
        "the checkpoint's vocabulary"
    );
    assert_eq!(hf["lm_head_tied"], true);

    // A checkpoint whose config.json does not fit its weights names the tensor; a
    // directory without a tokenizer says so.
    let bad = tmp.path().join("gpt2-bad");
    fs::create_dir_all(&bad).unwrap();
    for f in ["model.safetensors", "tokenizer.json"] {
        fs::copy(gpt2.join(f), bad.join(f)).unwrap();
    }
    let config = fs::read_to_string(gpt2.join("config.json")).unwrap();
    fs::write(
        bad.join("config.json"),
        config.replace("\"n_positions\": 64", "\"n_positions\": 128"),
    )
    .unwrap();
    let mut c = step_cmd("train", &data_root, &corpus);
    c.args(["--device", "cpu", "--set", &init(&bad)]);
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("transformer.wpe.weight has shape [64, 32], this model expects [128, 32]"),
        "{err}"
    );
    fs::remove_file(bad.join("tokenizer.json")).unwrap();
    let out = step_cmd("precompute", &data_root, &corpus)
        .args(["--force", "--set", &init(&bad)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("is not a Hugging Face GPT-2 checkpoint: tokenizer.json is missing"),
        "{err}"
    );
}
