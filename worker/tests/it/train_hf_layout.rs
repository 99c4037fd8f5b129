//! `model.safetensors` loads by name, strictly, into a Hugging Face-shaped PyTorch
//! GPT-2 (bench/trainer/torch_gpt2.py, the .venv's torch), and both implementations
//! continue a prompt identically.

use std::path::PathBuf;

use lavender_testkit::training::*;

#[test]
fn pytorch_reads_the_checkpoint_without_conversion_and_agrees_on_greedy_text() {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = workspace.join(".venv/bin/python");
    if !python.exists() {
        eprintln!("skipped: no {} (run `make setup`)", python.display());
        return;
    }
    let root = tempfile::tempdir().unwrap();
    write_tokens(root.path());
    let common = |c: &mut std::process::Command| {
        c.arg("--data-root")
            .arg(root.path())
            .args(["--device", "cpu"])
            .args(small_run_args(30, 2, 2, 100));
    };
    let mut train = worker();
    train.arg("train");
    common(&mut train);
    run_ok(&mut train);

    let mut sample = worker();
    sample.arg("generate");
    common(&mut sample);
    sample.args([
        "--prompt",
        "w5 w29",
        "--temperature",
        "0",
        "--max-new-tokens",
        "12",
    ]);
    let out = run_ok(&mut sample);
    let text = String::from_utf8(out.stdout).unwrap();
    let ours: Vec<u64> = text
        .split_whitespace()
        .map(|w| {
            w.trim_start_matches('w')
                .parse()
                .unwrap_or_else(|_| panic!("{text:?}"))
        })
        .collect();

    let run = std::fs::read_dir(root.path().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .unwrap();
    let model = checkpoints(&run).pop().unwrap().join("model.safetensors");
    let out = run_ok(
        std::process::Command::new(&python)
            .arg(workspace.join("bench/trainer/torch_gpt2.py"))
            .arg("--greedy")
            .arg(&model)
            .args([
                "--n-head",
                "2",
                "--prompt-ids",
                "5,29",
                "--new-tokens",
                "12",
            ]),
    );
    let theirs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let theirs: Vec<u64> = theirs["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        ours, theirs,
        "lavender and PyTorch continue the prompt differently"
    );
    assert_eq!(ours.len(), 14);
}
