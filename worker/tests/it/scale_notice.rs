//! A corpus that fills fewer shards than the scale asks for is said, in one line, by
//! `lavenderd start` (once the shards are built), by the status (JSON and text) and by
//! a `shards_short` milestone the worker writes when it picks its shards. The real
//! `lavenderd` supervises the real `lavender-worker` on a corpus of a few KiB.
//!
//! The daemon is the `lavenderd` binary beside this package's worker binary:
//! `cargo test --workspace` builds both; for this package alone build it first with
//! `cargo build -p lavenderd`.

use std::path::Path;
use std::time::Duration;

use lavender_testkit::{Lavenderd, WORDS, events, stdout, write_speeches};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(120);

/// Scale small's preset (21 shards) with a model and stages small enough to train in
/// seconds: the notice is about the shards, whatever the model.
fn config(corpus: &Path) -> String {
    format!(
        r#"steps: [downloads, dedup, filter, build_shards, precompute, train]
device: cpu
threads: 1
worker:
  command: ["{worker}"]
data:
  sources:
    - path: "{corpus}"
  shards: {{shard_bytes: 4000, validation_fraction: 0.1}}
  tokenizer: {{vocab_size: 320, min_frequency: 2}}
model: {{n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32}}
training:
  batch_size: 4
  seq_len: 16
  eval_every: 50
  eval_batches: 1
  stages:
    - {{name: pretrain, steps: 3, lr: 3.0e-3, checkpoint_every: 1000}}
    - {{name: sft, steps: 2, lr: 1.0e-3, checkpoint_every: 1000}}
    - {{name: dpo, steps: 2, lr: 5.0e-4, checkpoint_every: 1000, beta: 0.1}}
supervisor:
  listen: 127.0.0.1:0
  poll_interval_ms: 50
notify:
  desktop: false
"#,
        worker = WORKER,
        corpus = corpus.display(),
    )
}

fn notices(out: &std::process::Output) -> Vec<String> {
    stdout(out)
        .lines()
        .filter_map(|l| l.strip_prefix("notice: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn too_few_shards_for_the_scale_are_said_by_start_status_and_a_milestone() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_speeches(&dir.path().join("corpus"), &WORDS);
    let mut d = Lavenderd::with_real_worker(dir.path(), &config(&corpus));
    d.serve();

    // Before any shard exists, start has nothing to say about them.
    let out = d.start(&["--scale", "small", "--skip-train"]);
    assert_eq!(notices(&out), Vec::<String>::new(), "{}", stdout(&out));
    let st = d.wait_state("finished", T);
    let available = st["data"]["shards_available"]
        .as_u64()
        .unwrap_or_else(|| panic!("build_shards recorded its count: {st:#}"));
    assert!(
        (4..21).contains(&available),
        "the corpus fills tiny's 4 shards but fewer than small's 21: {available}"
    );
    let line = format!(
        "scale small wants 21 shards but the data fills only {available}, so training repeats it; add corpus under data.sources"
    );

    // The status: the count the scale wants, and the notice, in JSON and text.
    assert_eq!(st["data"]["shards_wanted"], 21, "{st:#}");
    assert_eq!(st["notices"], serde_json::json!([line]), "{st:#}");
    let text = stdout(&d.run(&["status"]));
    assert!(text.contains(&format!("notice:      {line}\n")), "{text}");
    assert!(text.contains("shards_wanted 21"), "{text}");

    // Once the shards are built, start says it in one line before training.
    let out = d.start(&["--scale", "small"]);
    assert_eq!(notices(&out), vec![line.clone()], "{}", stdout(&out));
    d.wait_state("finished", T);

    // The worker's milestone when it picks fewer shards than the preset asks for.
    let evs = events(&d.run_dir());
    let short: Vec<&Value> = evs.iter().filter(|e| e["kind"] == "shards_short").collect();
    assert_eq!(short.len(), 1, "{evs:#?}");
    assert_eq!(short[0]["message"], line.as_str());
    assert_eq!(short[0]["scale"], "small");
    assert_eq!(short[0]["shards_wanted"], 21);
    assert_eq!(short[0]["shards_available"], available);

    // A scale the data fills has nothing to say: tiny wants 4.
    let out = d.start(&["--scale", "tiny", "--skip-train"]);
    assert_eq!(notices(&out), Vec::<String>::new(), "{}", stdout(&out));
    let st = d.wait_state("finished", T);
    assert_eq!(st["pipeline"]["scale"], "tiny", "{st:#}");
    assert_eq!(st["data"]["shards_wanted"], 4, "{st:#}");
    assert_eq!(st["notices"], serde_json::json!([]), "{st:#}");
}
