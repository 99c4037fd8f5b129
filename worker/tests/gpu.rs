//! `make test-gpu` (never part of `make test`; built only with the `gpu-tests`
//! feature): lavender-worker in bf16 on a CUDA GPU. 50 steps whose loss falls; a
//! run stopped at step 25 and resumed ends within CUDA's rounding of a straight
//! run; and its speed beside the same PyTorch script on that GPU. On a machine
//! without CUDA it fails, saying so.
//!
//! Bit-for-bit resume holds on the CPU (worker/tests/train_resume.rs). On a GPU
//! the reductions of some backward kernels (attention, embedding gradients) add in
//! an order that changes from run to run, so two runs of the same steps differ in
//! the last bits, and bf16 rounding can carry that on. The tolerance: a relative
//! L2 distance of the final weights of at most `WEIGHT_RTOL`, and every step's
//! loss within `LOSS_ATOL` of the straight run's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use lavender_testkit::python::venv_tool;
use lavender_testkit::training::*;
use lavender_testkit::{events, read_json, repo};
use safetensors::SafeTensors;

const STEPS: u64 = 50;
const WEIGHT_RTOL: f64 = 5e-3;
const LOSS_ATOL: f64 = 5e-2;

/// The model and batch of `bench/trainer` (its tiny model), 50 pretraining steps.
fn gpu_args(steps: u64, every: u64) -> Vec<String> {
    [
        "threads=2".to_string(),
        "model.n_layer=2".into(),
        "model.n_head=2".into(),
        "model.n_embd=64".into(),
        "model.n_positions=128".into(),
        "model.dropout=0.0".into(),
        "training.batch_size=16".into(),
        "training.seq_len=64".into(),
        "training.log_every=1".into(),
        "training.eval_every=1000000".into(),
        "training.eval_batches=1".into(),
        "training.precision=bf16".into(),
        format!(
            "training.stages=[{{name: pretrain, steps: {steps}, lr: 3.0e-3, checkpoint_every: {every}}}]"
        ),
    ]
    .iter()
    .flat_map(|s| ["--set".to_string(), s.clone()])
    .collect()
}

fn train_on_gpu(root: &Path, run_dir: Option<&Path>) -> Command {
    let mut c = worker();
    c.arg("train")
        .arg("--data-root")
        .arg(root)
        .args(["--device", "cuda"]);
    if let Some(r) = run_dir {
        c.arg("--run-dir").arg(r);
    }
    c
}

/// Fails the test, clearly, on a machine where the worker finds no GPU.
fn require_cuda(root: &Path) {
    let out = train_on_gpu(root, Some(&root.join("probe")))
        .args(gpu_args(1, 1000))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "make test-gpu needs a CUDA GPU, and lavender-worker found none usable here:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn losses(run: &Path) -> Vec<f64> {
    read_json(&run.join("log_history.json"))
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("learning_rate").is_some())
        .map(|e| e["loss"].as_f64().unwrap())
        .collect()
}

fn final_weights(run: &Path) -> Vec<f32> {
    let last = checkpoints(run).pop().expect("a checkpoint");
    let bytes = std::fs::read(last.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort();
    names
        .into_iter()
        .flat_map(|n| {
            st.tensor(n)
                .unwrap()
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn seconds(cmd: &mut Command) -> f64 {
    let t = Instant::now();
    run_ok(cmd);
    t.elapsed().as_secs_f64()
}

#[test]
fn bf16_on_the_gpu_learns_resumes_within_cuda_tolerance_and_is_timed() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path();
    write_tokens(root);
    require_cuda(root);

    // Straight: 50 steps, saved at 25 and at the end.
    let straight = root.join("checkpoints/run-2026-01-01_00-00-01");
    run_ok(train_on_gpu(root, Some(&straight)).args(gpu_args(STEPS, 25)));
    let started = events(&straight)
        .into_iter()
        .find(|e| e["kind"] == "run_started")
        .unwrap();
    assert_eq!(started["device"], "cuda:0");
    assert_eq!(started["precision"], "bf16");
    let a = losses(&straight);
    assert_eq!(a.len() as u64, STEPS);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (first, last) = (mean(&a[..5]), mean(&a[a.len() - 5..]));
    println!("bf16 on cuda:0: loss {first:.3} over the first 5 steps, {last:.3} over the last 5");
    assert!(last < first - 0.5, "the loss did not fall: {a:?}");

    // Stopped at 25 and resumed.
    let other = tempfile::tempdir().unwrap();
    write_tokens(other.path());
    let resumed = other.path().join("checkpoints/run-2026-01-01_00-00-02");
    run_ok(
        train_on_gpu(other.path(), Some(&resumed))
            .args(gpu_args(STEPS, 25))
            .args(["--stop-at-step", "25"]),
    );
    run_ok(
        train_on_gpu(other.path(), None)
            .args(gpu_args(STEPS, 25))
            .args(["--resume", "latest"]),
    );
    let b = losses(&resumed);
    assert_eq!(b.len(), a.len());
    let worst_loss = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    let (wa, wb) = (final_weights(&straight), final_weights(&resumed));
    assert_eq!(wa.len(), wb.len());
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (x, y) in wa.iter().zip(&wb) {
        diff += f64::from(x - y).powi(2);
        norm += f64::from(*x).powi(2);
    }
    let rel = (diff / norm).sqrt();
    println!(
        "stop at 25 and resume against straight: final weights' relative L2 distance {rel:.2e} (tolerance {WEIGHT_RTOL:.0e}), largest loss difference {worst_loss:.2e} (tolerance {LOSS_ATOL:.0e})"
    );
    assert!(rel <= WEIGHT_RTOL, "weights differ by {rel:.3e}");
    assert!(worst_loss <= LOSS_ATOL, "losses differ by {worst_loss:.3e}");

    // Speed: (150 − 50) steps over the difference of two runs' wall times, so start-up
    // and the saves cancel; PyTorch's same model, batch and autocast on the same GPU.
    let time_run = |steps: u64| {
        let dir = tempfile::tempdir().unwrap();
        write_tokens(dir.path());
        seconds(
            train_on_gpu(dir.path(), Some(&dir.path().join("run")))
                .args(gpu_args(steps, 1_000_000)),
        )
    };
    let worker_sps = 100.0 / (time_run(150) - time_run(50));
    let script: PathBuf = repo().join("bench/trainer/torch_gpt2.py");
    let out = Command::new(venv_tool("python"))
        .arg(&script)
        .args(["--device", "cuda", "--precision", "bf16", "--steps", "100"])
        .args(["--n-layer", "2", "--n-head", "2", "--n-embd", "64"])
        .args(["--n-positions", "128", "--batch", "16", "--seq-len", "64"])
        .args(["--vocab", &VOCAB.to_string(), "--threads", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let torch: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let torch_sps = torch["steps_per_sec"].as_f64().unwrap();
    println!(
        "bf16 on cuda:0, 2 layers x 64 wide, batch 16 x 64: lavender-worker {worker_sps:.1} steps/s, PyTorch eager with autocast {torch_sps:.1} steps/s ({:.2}x)",
        worker_sps / torch_sps
    );
}
