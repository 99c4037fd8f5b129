//! bergson 2.5.1's SOURCE on a lavender run's export, as is: a tiny run trained by
//! the real worker, exported and resolved by the real `lavenderd`, then
//! - `optimizer.pt` checked with torch (weights_only load, named_parameters order,
//!   the same moments as `optimizer.safetensors`, loadable into torch.optim.AdamW);
//! - bergson's own run reader on the run directory: the run's `config.yaml` read as
//!   bergson's training config (AdamW, the model path), its `log_history.json` as
//!   the worker wrote it (no export rewrites it);
//! - `lavenderd resolve`'s fragment compared with what bergson's own `resolve()`
//!   and lr×steps derive for the same checkpoints (AdamW: momentum 0.0 derived from
//!   the run, the same model path, lr×steps within 1e-12);
//! - SOURCE's plain variant run by `python -m bergson` on a config made of that
//!   fragment with no value typed by hand, and the Adam variant by
//!   `lavenderd attribute`, both exiting 0 and writing scores;
//! - a query that is verbatim one of the training documents ranks it first;
//! - a second `attribute` call reuses the first one's Hessian passes (the cache
//!   under `<run>/attribution/cache/`) and gives the same scores;
//! - the helper's raised token-batch cap (bergson's own CLI refuses a batch above
//!   the context, still): scores with one window per batch and with every window
//!   in one batch agree to fp32 rounding, the same ranking.
//!
//! Needs bergson in the project's .venv: `bash scripts/attribution-setup.sh` (CI runs
//! it through scripts/ci-deps.sh). Without it the test fails and says so.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use lavender_testkit::repo;
use lavender_testkit::training::{run_ok, worker};
use serde_json::Value;

/// Training documents (each its own document in the corpus) and the two that are
/// asked about verbatim.
const DOCS: usize = 50;
const ASKED: [usize; 2] = [7, 41];
/// The model's context, and the plain variant's token batch (bergson's own CLI
/// refuses a longer one).
const CONTEXT: usize = 512;

fn python() -> PathBuf {
    std::env::var_os("LAVENDER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"))
}

fn lavenderd() -> PathBuf {
    let bin = lavender_testkit::lavenderd();
    // `cargo test --workspace --test attribution_bergson` builds only this package's
    // targets: a lavenderd older than its sources would test old code.
    let built = fs::metadata(&bin).unwrap().modified().unwrap();
    let newer: Vec<PathBuf> = ["src", "daemon/src"]
        .iter()
        .flat_map(|d| sources(&repo().join(d)))
        .filter(|f| fs::metadata(f).unwrap().modified().unwrap() > built)
        .collect();
    assert!(
        newer.is_empty(),
        "{} is older than {newer:?}: run `cargo build --workspace` first",
        bin.display()
    );
    bin
}

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|x| x == "rs" || x == "py") {
            out.push(p);
        }
    }
    out
}

/// bergson 2.5.1 must be importable: a missing install fails the test, naming the fix.
fn require_bergson() -> String {
    let out = Command::new(python())
        .args([
            "-c",
            "from importlib.metadata import version; print(version('bergson'), version('torch'))",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{} cannot run ({e}): run `make setup` and `bash scripts/attribution-setup.sh`",
                python().display()
            )
        });
    let versions = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && versions.starts_with("2.5.1 "),
        "bergson 2.5.1 is not installed in {} (got {versions:?}; {}): run \
         `bash scripts/attribution-setup.sh`",
        python().display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    versions
}

/// Fifty short documents of random words: each is its own document after the
/// data steps, and none repeats another.
fn corpus() -> Vec<String> {
    let words = [
        "the", "a", "river", "stone", "light", "of", "and", "to", "in", "king", "queen", "speaks",
        "gentle", "storm", "night", "morning", "sword", "crown", "love", "fear", "hope", "bright",
        "dark", "over", "under", "city", "field", "house", "sea", "ship", "wind", "fire",
    ];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    (0..DOCS)
        .map(|i| {
            let n = 6 + next(4);
            let body: Vec<&str> = (0..n).map(|_| words[next(words.len())]).collect();
            format!("Speaker {i} says {}.", body.join(" "))
        })
        .collect()
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
        "data.shards.validation_fraction=0.1".to_string(),
    ] {
        c.arg("--set").arg(set);
    }
    c
}

/// Eight AdamW steps of a two-layer GPT-2, a checkpoint (with its moments) every
/// four: exports at steps 4 and 8, one per SOURCE segment. Evaluations at steps 0,
/// 2, 4, 6, 8. The context is long for the data so that SOURCE's token batches
/// (at most the context) hold many documents: each of its passes over the
/// training text is then a few batches, not one per document.
fn train(data_root: &Path, corpus: &Path, run_dir: &Path) {
    let mut c = step_cmd("train", data_root, corpus);
    c.arg("--run-dir").arg(run_dir).args(["--device", "cpu"]);
    let positions = format!("model.n_positions={CONTEXT}");
    for set in [
        "model.n_layer=2",
        "model.n_head=2",
        "model.n_embd=32",
        positions.as_str(),
        "model.dropout=0.0",
        "training.batch_size=4",
        "training.seq_len=16",
        "training.eval_every=2",
        "training.eval_batches=1",
        "training.keep_checkpoints=10",
        "training.save_optimizer_state=all",
        "optimizer.warmup_steps=2",
        "optimizer.betas=[0.9, 0.95]",
        "threads=1",
        "training.stages=[{name: pretrain, steps: 8, lr: 3.0e-3, checkpoint_every: 4}]",
    ] {
        c.arg("--set").arg(set);
    }
    run_ok(&mut c);
}

fn lavenderd_ok(data_root: &Path, args: &[&std::ffi::OsStr]) -> String {
    let out = run_ok(
        Command::new(lavenderd())
            .arg("--data-root")
            .arg(data_root)
            .args(args)
            .env_remove("LAVENDER_CONFIG")
            .env_remove("LAVENDER_DATA_ROOT"),
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `lavenderd attribute ARGS…` must fail; its stderr.
fn attribute_err(data_root: &Path, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(lavenderd())
        .arg("--data-root")
        .arg(data_root)
        .arg("attribute")
        .args(args)
        .env_remove("LAVENDER_CONFIG")
        .env_remove("LAVENDER_DATA_ROOT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "lavenderd attribute {args:?} succeeded:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// Each way `lavenderd attribute` is given something it cannot use says what and
/// what to do, before SOURCE runs.
fn attribute_errors(tmp: &Path, data_root: &Path, run_dir: &Path, queries: &Path) {
    let run = run_dir.as_os_str();
    let err = attribute_err(
        data_root,
        &[
            os("--run"),
            os("no-such-run"),
            os("--queries"),
            queries.as_os_str(),
        ],
    );
    assert!(
        err.contains("run \"no-such-run\"") && err.contains("runs here"),
        "{err}"
    );
    let unexported = data_root.join("checkpoints/run-unexported");
    fs::create_dir_all(&unexported).unwrap();
    let err = attribute_err(
        data_root,
        &[
            os("--run"),
            unexported.as_os_str(),
            os("--queries"),
            queries.as_os_str(),
        ],
    );
    assert!(
        err.contains("has no exported checkpoints")
            && err.contains("lavenderd export --run run-unexported --all"),
        "{err}"
    );
    fs::remove_dir(&unexported).unwrap();
    let bad = tmp.join("bad-queries.jsonl");
    for (text, want) in [
        ("what is a river\n", "--queries: line 1"),
        ("{\"body\": \"a river\"}\n", "no string \"text\" field"),
    ] {
        fs::write(&bad, text).unwrap();
        let err = attribute_err(
            data_root,
            &[os("--run"), run, os("--queries"), bad.as_os_str()],
        );
        assert!(err.contains(want), "{err}");
    }
    let err = attribute_err(
        data_root,
        &[
            os("--run"),
            run,
            os("--queries"),
            queries.as_os_str(),
            os("--python"),
            tmp.join("no-python").as_os_str(),
        ],
    );
    assert!(err.contains("scripts/attribution-setup.sh"), "{err}");
    // A Python without bergson: the project's, without its site-packages.
    let bare = tmp.join("python-without-site-packages");
    lavender_testkit::write_executable(
        &bare,
        &format!("#!/bin/sh\nexec {} -S \"$@\"\n", python().display()),
    );
    let err = attribute_err(
        data_root,
        &[
            os("--run"),
            run,
            os("--queries"),
            queries.as_os_str(),
            os("--python"),
            bare.as_os_str(),
        ],
    );
    assert!(
        err.contains("bergson is not installed")
            && err.contains("bash scripts/attribution-setup.sh"),
        "{err}"
    );
    // A query longer than the model's context (SOURCE's token batch).
    let long = tmp.join("long-query.jsonl");
    let words = vec!["river stone light"; CONTEXT].join(" ");
    fs::write(
        &long,
        serde_json::json!({ "text": words }).to_string() + "\n",
    )
    .unwrap();
    let err = attribute_err(
        data_root,
        &[
            os("--run"),
            run,
            os("--queries"),
            long.as_os_str(),
            os("--python"),
            python().as_os_str(),
        ],
    );
    assert!(
        err.contains("query 1 of")
            && err.contains(&format!(
                "but the model's context (n_positions) is {CONTEXT} tokens"
            ))
            && err.contains("model.n_positions"),
        "{err}"
    );
}

/// The trainer's windows (`seq_len + 1` tokens, `seq_len` apart) of the chunk's
/// first shard that lie inside one document (no end-of-text token in them): each
/// window's text and its document's 0-based line in the shard's JSONL file.
fn windows_inside_documents(data_root: &Path, seq_len: usize) -> Vec<(String, usize)> {
    use lavender::tokens::{self, TokenBytes, TokenIndex};
    let dir = data_root.join("tokens");
    let index = TokenIndex::read(&dir).unwrap();
    let ids = tokens::read_array(&dir.join(&index.pretrain.shards[0].file), index.dtype).unwrap();
    let bytes = TokenBytes::read(&dir.join("tokenizer.json")).unwrap();
    tokens::pretrain_window_starts(ids.len(), seq_len)
        .filter(|&s| !ids[s..=s + seq_len].contains(&index.eos_id))
        .filter_map(|s| {
            let text: Vec<u8> = ids[s..=s + seq_len]
                .iter()
                .flat_map(|&id| bytes.of(id).to_vec())
                .collect();
            let doc = ids[..s].iter().filter(|&&id| id == index.eos_id).count();
            String::from_utf8(text).ok().map(|t| (t, doc))
        })
        .collect()
}

fn os<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> &std::ffi::OsStr {
    s.as_ref()
}

/// A bergson config of one `approxunrolling` step: the data and model settings,
/// then lavender's fragment unchanged (indented under the step).
fn bergson_config(
    run_path: &Path,
    model: &Path,
    train: &Path,
    query: &Path,
    fragment: &str,
) -> String {
    let q = |p: &Path| serde_json::to_string(&p.display().to_string()).unwrap();
    let mut s = format!(
        "steps:\n- approxunrolling:\n    index_cfg:\n      run_path: {}\n      model: {}\n      \
         precision: fp32\n      token_batch_size: {}\n      data:\n        dataset: {}\n        \
         prompt_column: text\n    hessian_cfg:\n      method: kfac\n      ev_correction: true\n",
        q(run_path),
        q(model),
        CONTEXT,
        q(train)
    );
    for line in fragment.lines() {
        s.push_str("    ");
        s.push_str(line);
        s.push('\n');
    }
    s.push_str(&format!(
        "      query:\n        dataset: {}\n        prompt_column: text\n        aggregation: none\n",
        q(query)
    ));
    s
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

#[test]
fn source_runs_on_a_lavender_export_as_is() {
    let started = Instant::now();
    let versions = require_bergson();
    println!("bergson, torch: {versions}");
    let tmp = tempfile::tempdir().unwrap();
    let data_root = tmp.path().join("data");
    let corpus_file = tmp.path().join("corpus.txt");
    let docs = corpus();
    fs::write(&corpus_file, docs.join("\n\n")).unwrap();
    for step in ["downloads", "dedup", "filter", "build_shards", "precompute"] {
        run_ok(&mut step_cmd(step, &data_root, &corpus_file));
    }
    let run_dir = data_root.join("checkpoints/run-2026-01-01_00-00-00");
    train(&data_root, &corpus_file, &run_dir);
    println!("trained in {:.1?}", started.elapsed());

    // The worker writes its history as HF readers and SOURCE take it: every entry
    // with a learning_rate, evaluations on their step's training entry (step 0's,
    // before any update, at 0.0).
    let read_history = || -> Vec<Value> {
        serde_json::from_slice(&fs::read(run_dir.join("log_history.json")).unwrap()).unwrap()
    };
    let history_as_written = fs::read(run_dir.join("log_history.json")).unwrap();
    let history = read_history();
    let evals = history
        .iter()
        .filter(|e| e.get("eval_loss").is_some())
        .count();
    assert!(evals >= 5, "{history:?}");
    for e in &history {
        assert!(e["learning_rate"].is_number(), "{e}");
    }
    // bergson's reader takes the run's config.yaml as its own training config.
    let config_yaml = fs::read_to_string(run_dir.join("config.yaml")).unwrap();
    assert!(
        config_yaml.starts_with("# lavender") && config_yaml.contains("\ntrain:\n  run_path: "),
        "{config_yaml}"
    );

    let export: Value = serde_json::from_str(&lavenderd_ok(
        &data_root,
        &[
            os("export"),
            os("--run"),
            run_dir.as_os_str(),
            os("--all"),
            os("--json"),
        ],
    ))
    .unwrap();
    let ckpts: Vec<PathBuf> = export["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "written")
        .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
        .collect();
    let names: Vec<String> = ckpts
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["checkpoint-4", "checkpoint-8"]);
    // The export had nothing to rewrite: the history is read as the worker wrote
    // it. One entry per step, evaluations on theirs, step 0's of its own.
    assert_eq!(
        fs::read(run_dir.join("log_history.json")).unwrap(),
        history_as_written,
        "the export rewrote log_history.json"
    );
    let history = read_history();
    assert_eq!(
        history
            .iter()
            .filter(|e| e.get("eval_loss").is_some())
            .count(),
        evals
    );
    assert_eq!(history.len(), 8 + 1, "{history:?}");
    assert_eq!(
        (&history[0]["step"], &history[0]["learning_rate"]),
        (&0.into(), &0.0.into())
    );
    for c in &ckpts {
        let state: Value =
            serde_json::from_slice(&fs::read(c.join("trainer_state.json")).unwrap()).unwrap();
        for e in state["log_history"].as_array().unwrap() {
            assert!(e["learning_rate"].is_number(), "{}: {e}", c.display());
        }
    }

    // resolve: the fragment, two checkpoints per segment.
    let mut args = vec![os("resolve"), os("--segments"), os("2")];
    args.extend(ckpts.iter().map(|c| c.as_os_str()));
    let fragment = lavenderd_ok(&data_root, &args);
    println!("lavenderd resolve --segments 2 …:\n{fragment}");
    let fragment_file = tmp.path().join("fragment.yaml");
    fs::write(&fragment_file, &fragment).unwrap();

    let mut check = Command::new(python());
    check
        .arg(repo().join("worker/tests/attribution_support/check_export.py"))
        .arg(&fragment_file)
        .args(&ckpts)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1");
    let out = check.output().unwrap();
    assert!(
        out.status.success(),
        "check_export.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // bergson logs to stdout too: the result is the last line.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("check_export.py printed no JSON last ({e}):\n{stdout}"));
    println!("versions: {}", v["versions"]);

    // optimizer.pt: torch.optim's layout, the checkpoint's own moments.
    for (c, step) in ckpts.iter().zip([4.0, 8.0]) {
        let o = &v["optimizer_pt"][c.display().to_string()];
        assert_eq!(
            o["top_keys"],
            serde_json::json!(["param_groups", "state"]),
            "{o}"
        );
        assert_eq!(o["entries"], o["parameters"], "{o}");
        assert_eq!(
            o["entry_keys"],
            serde_json::json!(["exp_avg", "exp_avg_sq", "step"]),
            "{o}"
        );
        assert_eq!(
            (o["step"].as_f64(), o["step_is_tensor"].as_bool()),
            (Some(step), Some(true))
        );
        assert_eq!(o["group_keys"], o["reference_group_keys"], "{o}");
        assert_eq!(o["betas"], serde_json::json!([0.9, 0.95]));
        assert_eq!(o["mismatched_moments"], serde_json::json!([]), "{o}");
        assert_eq!(o["bergson_mapping_matches"], true);
        assert_eq!(o["loaded_into_adamw"], true);
        let n = o["parameters"].as_u64().unwrap();
        assert_eq!(o["params"], serde_json::json!((0..n).collect::<Vec<_>>()));
    }

    // bergson's own reader on the run directory: its training config is the
    // run's `train:` section (AdamW, the final checkpoint's export as the model),
    // its learning-rate history the run's log_history.json as the worker wrote it.
    let run_abs = fs::canonicalize(&run_dir).unwrap();
    let read = &v["bergson_run"];
    println!("bergson's load_training_config(run) and lr_history_path: {read}");
    assert_eq!(read["optimizer"], "adamw", "{read}");
    assert_eq!(read["adam_beta1"], 0.9, "{read}");
    assert_eq!(read["adam_beta2"], 0.95, "{read}");
    assert_eq!(
        read["run_path"].as_str().map(PathBuf::from),
        Some(run_abs.clone())
    );
    assert_eq!(
        read["model"].as_str().map(PathBuf::from),
        Some(run_abs.join("exported/checkpoint-8"))
    );
    assert_eq!(
        read["lr_history"].as_str().map(PathBuf::from),
        Some(run_abs.join("log_history.json"))
    );

    // lavender's resolve vs bergson's own resolve(): the same lr×steps per segment,
    // momentum 0.0 derived from the run (AdamW), the same model path.
    let f = &v["fragment"];
    assert_eq!(
        f["momentum"], 0.0,
        "AdamW: SOURCE's momentum is 0.0, not β1"
    );
    assert_eq!(f["use_adam_preconditioner"], true);
    assert_eq!(f["segments"], 2);
    assert_eq!(f["step_size_list"], serde_json::json!([4, 4]));
    let own = &v["bergson_own"];
    let own_adam = &v["bergson_own_adam"];
    let given = &v["bergson_given"];
    println!("bergson's own resolve() (checkpoints, segments): {own}");
    println!("bergson's own resolve() (…, use_adam_preconditioner: true): {own_adam}");
    let log = |x: &Value| -> Vec<String> {
        x["log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap().to_string())
            .collect()
    };
    for r in [own, own_adam] {
        assert_eq!(r["momentum"], 0.0, "{r}");
        assert_eq!(r["model_path"], f["model_path"], "{r}");
        // Derived from the run's optimizer, not bergson's fallback for runs it
        // cannot read ("Ignoring … as a trainer run").
        assert!(
            log(r)
                .iter()
                .any(|m| m.contains("Filled from run") && m.contains("momentum=0.0")),
            "{r}"
        );
        assert!(!log(r).iter().any(|m| m.contains("Ignoring")), "{r}");
    }
    // bergson 2.5.1's resolve() never turns the preconditioner on itself; reading
    // `optimizer: adamw` it warns when the caller left it off, and not otherwise.
    assert_eq!(own["use_adam_preconditioner"], false);
    assert!(
        log(own)
            .iter()
            .any(|m| m.contains("trained with adamw but use_adam_preconditioner is not set")),
        "{own}"
    );
    assert_eq!(own_adam["use_adam_preconditioner"], true);
    assert!(
        !log(own_adam)
            .iter()
            .any(|m| m.contains("use_adam_preconditioner")),
        "{own_adam}"
    );
    assert_eq!(given["momentum"], 0.0);
    assert_eq!(given["use_adam_preconditioner"], true);
    let list = |x: &Value| -> Vec<f64> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_f64().unwrap())
            .collect()
    };
    let given_lts = list(&given["lr_times_steps"]);
    let lrs = list(&f["lr_list"]);
    let ours: Vec<f64> = lrs.iter().map(|lr| lr * 4.0 * 1.0).collect();
    assert_eq!(
        given_lts, ours,
        "bergson computes lr×steps from the fragment as lavender does"
    );
    for r in [own, own_adam] {
        let lts = list(&r["lr_times_steps"]);
        assert_eq!(lts.len(), ours.len());
        for (a, b) in lts.iter().zip(&ours) {
            assert!(
                close(*a, *b),
                "bergson's own lr×steps {lts:?} vs lavender's {ours:?}"
            );
        }
        assert!(lts.iter().all(|x| *x > 0.0), "{lts:?}");
    }

    // SOURCE, plain variant: lavender's fragment with the Adam preconditioner
    // explicitly off (an explicit value wins), run by bergson's own CLI.
    let mut args = vec![
        os("resolve"),
        os("--segments"),
        os("2"),
        os("--use-adam-preconditioner"),
        os("false"),
    ];
    args.extend(ckpts.iter().map(|c| c.as_os_str()));
    let plain_fragment = lavenderd_ok(&data_root, &args);
    assert!(
        plain_fragment.contains("use_adam_preconditioner: false"),
        "{plain_fragment}"
    );
    assert!(plain_fragment.contains("momentum: 0.0"), "{plain_fragment}");
    let work = tmp.path().join("plain");
    fs::create_dir_all(&work).unwrap();
    let train_file = data_root.join("corpus/filtered/documents.jsonl");
    let query_file = tmp.path().join("queries.jsonl");
    let asked: Vec<String> = ASKED
        .iter()
        .map(|&i| serde_json::json!({ "text": docs[i] }).to_string())
        .collect();
    fs::write(&query_file, asked.join("\n") + "\n").unwrap();
    let t = Instant::now();
    attribute_errors(tmp.path(), &data_root, &run_dir, &query_file);
    println!("attribute's errors checked in {:.1?}", t.elapsed());
    let config = work.join("config.yaml");
    fs::write(
        &config,
        bergson_config(
            &work.join("source"),
            ckpts.last().unwrap(),
            &train_file,
            &query_file,
            &plain_fragment,
        ),
    )
    .unwrap();
    let t = Instant::now();
    let out = Command::new(python())
        .args(["-m", "bergson"])
        .arg(&config)
        .current_dir(&work)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_DATASETS_CACHE", work.join("datasets-cache"))
        .env("WANDB_MODE", "disabled")
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python -m bergson {} failed:\n{log}",
        config.display()
    );
    println!(
        "SOURCE (plain): python -m bergson {} exit 0 in {:.1?}",
        config.display(),
        t.elapsed()
    );
    for line in log
        .lines()
        .filter(|l| l.contains("lr_times_steps") || l.contains("optimizer variant"))
    {
        println!("  {}", line.trim());
    }
    let info: Value =
        serde_json::from_slice(&fs::read(work.join("source/scores/info.json")).unwrap()).unwrap();
    assert_eq!(info["num_rows"].as_u64(), Some(DOCS as u64), "{info}");
    assert_eq!(
        info["num_scores"].as_u64(),
        Some(ASKED.len() as u64),
        "{info}"
    );

    // SOURCE, Adam variant, through `lavenderd attribute` on the run's training
    // data as it saw it: the chunk's shard (no validation document), cut into the
    // trainer's windows of seq_len + 1 = 17 tokens. The queries are two of those
    // windows, verbatim.
    let shard = data_root.join("shards/shard-00000.jsonl");
    let shard_docs: Vec<String> = fs::read_to_string(&shard)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(shard_docs.len() < DOCS, "validation documents are held out");
    // The queries: two of the trainer's windows, verbatim, each inside one document
    // (SOURCE scores windows; a whole document longer than a window would be
    // matched by parts of it only).
    let inside = windows_inside_documents(&data_root, 16);
    assert!(inside.len() >= 2, "windows inside one document: {inside:?}");
    let picked = [&inside[inside.len() / 5], &inside[inside.len() * 4 / 5]];
    let asked_lines: Vec<usize> = picked.iter().map(|(_, doc)| *doc).collect();
    let run_queries = tmp.path().join("run-queries.jsonl");
    let asked: Vec<String> = picked
        .iter()
        .map(|(text, _)| serde_json::json!({ "text": text }).to_string())
        .collect();
    fs::write(&run_queries, asked.join("\n") + "\n").unwrap();
    let index: Value =
        serde_json::from_slice(&fs::read(data_root.join("tokens/index.json")).unwrap()).unwrap();
    let shard_tokens = index["pretrain"]["shards"][0]["tokens"].as_u64().unwrap();
    // The trainer's windows: 16 apart while a whole 17-token window fits.
    let want_windows = (shard_tokens - 1) / 16;
    let t = Instant::now();
    let result_file = tmp.path().join("attribution.json");
    let out = run_ok(
        Command::new(lavenderd())
            .arg("--data-root")
            .arg(&data_root)
            .arg("attribute")
            .arg("--run")
            .arg(&run_dir)
            .arg("--queries")
            .arg(&run_queries)
            .args(["--from-run", "--top", "5", "--python"])
            .arg(python())
            .arg("--out")
            .arg(&result_file)
            .env_remove("LAVENDER_CONFIG")
            .env_remove("LAVENDER_DATA_ROOT"),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "lavenderd attribute (Adam variant) in {:.1?}:\n{stderr}{text}",
        t.elapsed()
    );
    // Only lavenderd's own lines reach the terminal (the data root it read, then
    // attribute's); the libraries' go to the log.
    for line in stderr.lines() {
        assert!(
            line.starts_with("attribute: ") || line.starts_with("data root: "),
            "{line:?} in\n{stderr}"
        );
    }
    assert!(!text.to_lowercase().contains("warn"), "{text}");
    let r: Value = serde_json::from_slice(&fs::read(&result_file).unwrap()).unwrap();
    assert_eq!(r["train_documents"].as_u64(), Some(shard_docs.len() as u64));
    assert_eq!(
        r["train_windows"]["count"].as_u64(),
        Some(want_windows),
        "{r}"
    );
    assert_eq!(r["train_windows"]["tokens"], 17);
    assert_eq!(
        r["train_windows"]["shards"],
        serde_json::json!(["shard-00000"])
    );
    assert!(
        text.contains("a document's score is its best window's"),
        "{text}"
    );
    let config_text = fs::read_to_string(r["config"].as_str().unwrap()).unwrap();
    assert!(
        config_text.contains("use_adam_preconditioner: true"),
        "{config_text}"
    );
    for ((q, &line), (window, _)) in r["queries"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&asked_lines)
        .zip(picked)
    {
        let top = q["top"].as_array().unwrap();
        assert_eq!(top.len(), 5);
        assert!(
            top.iter()
                .all(|t| t["score"].as_f64().is_some_and(f64::is_finite))
        );
        println!(
            "query = shard-00000.jsonl:{}: top {:?}",
            line + 1,
            top.iter()
                .map(|t| (
                    t["document"]["line"].as_u64().unwrap(),
                    t["score"].as_f64().unwrap()
                ))
                .collect::<Vec<_>>()
        );
        let first = &top[0];
        assert_eq!(
            (
                first["document"]["file"]
                    .as_str()
                    .map(|f| Path::new(f).ends_with("shards/shard-00000.jsonl")),
                first["document"]["line"].as_u64()
            ),
            (Some(true), Some(line as u64 + 1)),
            "the document of the verbatim training window should rank first: {q}"
        );
        // Its winning window holds part of it, with its text and offsets.
        let w = &first["window"];
        let [from, to] = [&w["document_chars"][0], &w["document_chars"][1]]
            .map(|v| v.as_u64().unwrap() as usize);
        assert!(from < to, "{w}");
        let part: String = shard_docs[line]
            .chars()
            .skip(from)
            .take(to - from)
            .collect();
        assert!(w["text"].as_str().unwrap().contains(&part), "{w}");
        assert_eq!(w["text"].as_str(), Some(window.as_str()), "{w}");
    }
    assert_eq!(r["hessians"]["cache"], "computed", "{}", r["hessians"]);
    assert_eq!(r["batch_tokens"], 4096);

    // Again: the Hessian passes from the cache, the query's part afresh, in a
    // new folder; the same scores (only the sampled labels of the Hessian passes
    // are random, and those are reused).
    let again_file = tmp.path().join("attribution-again.json");
    let t = Instant::now();
    let out = run_ok(
        Command::new(lavenderd())
            .arg("--data-root")
            .arg(&data_root)
            .arg("attribute")
            .arg("--run")
            .arg(&run_dir)
            .arg("--queries")
            .arg(&run_queries)
            .args(["--top", "5", "--json", "--python"])
            .arg(python())
            .arg("--out")
            .arg(&again_file)
            .env_remove("LAVENDER_CONFIG")
            .env_remove("LAVENDER_DATA_ROOT"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "lavenderd attribute again in {:.1?}:\n{stderr}",
        t.elapsed()
    );
    let again: Value = serde_json::from_slice(&fs::read(&again_file).unwrap()).unwrap();
    assert_eq!(
        again["hessians"]["cache"], "reused",
        "{}",
        again["hessians"]
    );
    assert_eq!(again["hessians"]["dir"], r["hessians"]["dir"]);
    assert!(
        stderr.contains("attribute: reusing the Hessian passes cached in"),
        "{stderr}"
    );
    assert_ne!(again["scores"], r["scores"], "a fresh folder");
    // Progress: the query pass and one scoring pass per checkpoint, as JSON.
    let progress: Vec<Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = progress.last().expect("progress objects on stderr");
    assert_eq!(
        (&last["pass"], &last["passes"]),
        (&3.into(), &3.into()),
        "{last}"
    );
    assert_eq!(last["stage"], "scoring");
    for (a, b) in r["queries"]
        .as_array()
        .unwrap()
        .iter()
        .zip(again["queries"].as_array().unwrap())
    {
        let top = |q: &Value| -> Vec<(u64, f64)> {
            q["top"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    (
                        t["window"]["index"].as_u64().unwrap(),
                        t["score"].as_f64().unwrap(),
                    )
                })
                .collect()
        };
        let (x, y) = (top(a), top(b));
        assert_eq!(
            x.iter().map(|t| t.0).collect::<Vec<_>>(),
            y.iter().map(|t| t.0).collect::<Vec<_>>()
        );
        for (p, q) in x.iter().zip(&y) {
            assert!((p.1 - q.1).abs() <= 1e-4 * p.1.abs(), "{x:?} vs {y:?}");
        }
    }

    batch_size_agreement(tmp.path(), &r);
    println!("whole test: {:.1?}", started.elapsed());
}

/// SOURCE on the run's first windows with one window per batch and with all of
/// them in one batch, through the helper's `source` (bergson's CLI with its cap
/// raised), with the dataset's labels in the Hessian passes (bergson's default
/// samples them from the model, unseeded, so two runs differ by that noise
/// whatever their batches): the same ranking, scores equal to fp32 rounding.
/// bergson's own CLI still refuses the larger batch: when it stops, the helper's
/// patch can go.
fn batch_size_agreement(tmp: &Path, report: &Value) {
    let config = PathBuf::from(report["config"].as_str().unwrap());
    let work = config.parent().unwrap();
    let helper = work.join("attribute_helper.py");
    let out = Command::new(python())
        .arg(&helper)
        .arg("check")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the helper does not fit this bergson: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 24 windows, 17 tokens each.
    let rows: Vec<String> = fs::read_to_string(work.join("train.jsonl"))
        .unwrap()
        .lines()
        .take(24)
        .map(str::to_string)
        .collect();
    assert_eq!(rows.len(), 24);
    let train = tmp.join("agreement-train.jsonl");
    fs::write(&train, rows.join("\n") + "\n").unwrap();
    let text = fs::read_to_string(&config).unwrap();
    let written_train = work.join("train.jsonl");
    let written_source = work.join("source");
    let configs: Vec<(u64, PathBuf, PathBuf)> = [17u64, 4096]
        .iter()
        .map(|&budget| {
            let dir = tmp.join(format!("agreement-{budget}"));
            let c = text
                .replace(
                    &format!("\"{}\"", written_source.display()),
                    &format!("\"{}\"", dir.join("source").display()),
                )
                .replace(
                    &format!("\"{}\"", written_train.display()),
                    &format!("\"{}\"", train.display()),
                )
                .replace(
                    "token_batch_size: 4096",
                    &format!("token_batch_size: {budget}"),
                )
                .replace(
                    "      ev_correction: true\n",
                    "      ev_correction: true\n      use_dataset_labels: true\n",
                );
            assert!(
                c.contains("use_dataset_labels: true") && c.contains(&train.display().to_string())
            );
            fs::create_dir_all(&dir).unwrap();
            let file = dir.join("config.yaml");
            fs::write(&file, c).unwrap();
            (budget, dir, file)
        })
        .collect();
    let env = |c: &mut Command, dir: &Path| {
        c.current_dir(dir)
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .env("HF_DATASETS_OFFLINE", "1")
            .env("HF_DATASETS_CACHE", dir.join("datasets-cache"))
            .env("WANDB_MODE", "disabled");
    };
    // bergson's own CLI: the cap is still there.
    let (_, dir, big) = &configs[1];
    let mut c = Command::new(python());
    c.args(["-m", "bergson"]).arg(big);
    env(&mut c, dir);
    let out = c.output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && said.contains("Token batch size 4096 exceeds model max length"),
        "bergson's CLI took a token batch above the context: its cap moved, and the helper's patch may go:\n{said}"
    );
    fs::remove_dir_all(dir.join("source")).ok();
    for (budget, dir, file) in &configs {
        let t = Instant::now();
        let mut c = Command::new(python());
        c.arg(&helper).arg("source").arg(file);
        env(&mut c, dir);
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "helper source {} failed:\n{}{}",
            file.display(),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        println!(
            "SOURCE, {budget} tokens a batch, dataset labels: {:.1?}",
            t.elapsed()
        );
    }
    let compare = r#"
import json, sys
from pathlib import Path
import numpy as np
from bergson.data import load_scores
a, b = (np.asarray(load_scores(Path(d))[:], dtype=np.float64) for d in sys.argv[1:3])
out = []
for q in range(a.shape[1]):
    x, y = a[:, q], b[:, q]
    out.append({
        "top": [np.argsort(x)[:5].tolist(), np.argsort(y)[:5].tolist()],
        "max_rel": float(np.abs(x - y).max() / np.abs(x).max()),
        "max_elem_rel": float((np.abs(x - y) / np.maximum(np.abs(x), 1e-30)).max()),
    })
print(json.dumps(out))
"#;
    let out = Command::new(python())
        .args(["-c", compare])
        .arg(configs[0].1.join("source/scores"))
        .arg(configs[1].1.join("source/scores"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    println!("scores, 17 vs 4096 tokens a batch (per query): {v}");
    for q in v.as_array().unwrap() {
        assert_eq!(q["top"][0], q["top"][1], "the same top 5: {q}");
        // fp32 sums in another order, through eigendecompositions: 1e-4 of the
        // largest score.
        assert!(q["max_rel"].as_f64().unwrap() < 1e-4, "{q}");
    }
}
