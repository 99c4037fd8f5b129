//! Train a tiny model with the real pipeline (data steps on a small corpus, then
//! `train`), export it with `lavender::export`, and load the export with Hugging
//! Face `transformers` in the project's .venv: same logits as the tch model, text
//! from `pipeline("text-generation")`, the tokenizer's ids, the per-step learning
//! rates and moments. Installs `transformers` into .venv when missing
//! (scripts/hf-setup.sh) and prints the versions used.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use lavender::export::{self, ExportOptions, ExportStatus, ResolveOptions, Selection};
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
    for step in ["downloads", "dedup", "filter", "build_shards", "precompute"] {
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
