//! Attribution on the pipeline the README starts, as a user runs it: `lavenderd start
//! --scale tiny --foreground` on a fresh data root (the embedded corpus and the
//! default config, what `make run` does), `lavenderd export`, then `lavenderd
//! attribute --from-run` with a query that is, verbatim, one of the run's training
//! windows (a window that lies inside one document). Its document must rank first,
//! the report must give the winning window's text and offsets, and nothing but
//! lavenderd's own lines (and, with `--json`, its progress objects) may reach the
//! terminal. A second query then reuses the first call's Hessian passes from
//! `<run>/attribution/cache/`, and finds its own window's document first too.
//!
//! - `at_two_checkpoints_…` (part of `make test`): the newest two of the run's
//!   checkpoints exported, SOURCE over a sample of the training windows
//!   (`--windows 1000`: every 6th of the 5,574, the query's window among them) at
//!   each; one query (the cache's reuse is `attribution_bergson`'s and the full
//!   test's).
//! - `at_every_checkpoint_…` (`make test-attribution`, feature
//!   `attribution-tests`): every checkpoint exported (five), as `export --all`,
//!   and the second query on the cache.
//!
//! They need bergson in the project's .venv (`bash scripts/attribution-setup.sh`;
//! `make setup` and CI's scripts/ci-deps.sh run it) and fail, naming the fix,
//! without it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use lavender::tokens::{self, TokenBytes, TokenIndex};
use lavender_testkit::repo;
use serde_json::Value;

fn python() -> PathBuf {
    repo().join(".venv/bin/python")
}

fn lavenderd(data_root: &Path) -> Command {
    let mut c = Command::new(lavender_testkit::lavenderd());
    // From the checkout, as `make run`'s user: `attribute` finds .venv's Python.
    c.current_dir(repo())
        .arg("--data-root")
        .arg(data_root)
        .env_remove("LAVENDER_CONFIG")
        .env_remove("LAVENDER_DATA_ROOT");
    c
}

fn run_ok(c: &mut Command) -> (String, String) {
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{c:?} failed ({:?})\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    (stdout, stderr)
}

fn require_bergson() {
    let versions = Command::new(python())
        .args([
            "-c",
            "from importlib.metadata import version; print(version('bergson'))",
        ])
        .output()
        .expect("the project's .venv: run `make setup`");
    assert!(
        String::from_utf8_lossy(&versions.stdout).trim() == "2.5.1",
        "bergson 2.5.1 is not installed in {}: run `bash scripts/attribution-setup.sh`",
        python().display()
    );
}

/// Training windows of the run's chunk that lie inside one document (no
/// end-of-text token in them), from the middle of its first shard on, among
/// every `every`-th window of the trainer's numbering: each one's text and the
/// document it belongs to.
fn windows_inside_a_document(
    data_root: &Path,
    seq_len: usize,
    n: usize,
    every: usize,
) -> Vec<(String, String)> {
    let index = TokenIndex::read(&data_root.join("tokens")).unwrap();
    let shard = &index.pretrain.shards[0];
    let ids = tokens::read_array(&data_root.join("tokens").join(&shard.file), index.dtype).unwrap();
    let bytes = TokenBytes::read(&data_root.join("tokens/tokenizer.json")).unwrap();
    let docs: Vec<String> = fs::read_to_string(
        data_root
            .join("shards")
            .join(format!("{}.jsonl", shard.shard)),
    )
    .unwrap()
    .lines()
    .map(|l| {
        serde_json::from_str::<Value>(l).unwrap()["text"]
            .as_str()
            .unwrap()
            .to_string()
    })
    .collect();
    // Windows in the trainer's cut; from the middle of the shard.
    let starts: Vec<usize> = tokens::pretrain_window_starts(ids.len(), seq_len).collect();
    let mut out: Vec<(String, String)> = Vec::new();
    let from = starts.len() / 2;
    for (i, &s) in starts.iter().enumerate().skip(from) {
        if i % every != 0 {
            continue;
        }
        // Not at a document's first token (the previous one is its EOT), so the
        // window is a document's middle.
        if ids[s..=s + seq_len].contains(&index.eos_id) || s == 0 || ids[s - 1] == index.eos_id {
            continue;
        }
        let text: Vec<u8> = ids[s..=s + seq_len]
            .iter()
            .flat_map(|&id| bytes.of(id).to_vec())
            .collect();
        let Ok(text) = String::from_utf8(text) else {
            continue;
        };
        // Its document: the shard's documents, in order, hold the window's text.
        let holders: Vec<&String> = docs.iter().filter(|d| d.contains(&text)).collect();
        if holders.len() != 1 || out.iter().any(|(_, d)| d == holders[0]) {
            continue;
        }
        out.push((text, holders[0].clone()));
        if out.len() == n {
            return out;
        }
    }
    panic!("fewer than {n} windows inside one document each");
}

/// The default pipeline on a fresh data root: the run's directory and its
/// checkpoints' names, oldest first.
fn default_pipeline(root: &Path) -> (PathBuf, Vec<String>) {
    let t = Instant::now();
    run_ok(lavenderd(root).args(["start", "--scale", "tiny", "--foreground"]));
    eprintln!(
        "the default pipeline at --scale tiny: {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let runs: Vec<PathBuf> = fs::read_dir(root.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = runs[0].clone();
    let (listing, _) = run_ok(
        lavenderd(root)
            .arg("checkpoints")
            .arg("--run")
            .arg(run.file_name().unwrap())
            .arg("--json"),
    );
    let listing: Value = serde_json::from_str(&listing).unwrap();
    let mut named: Vec<(u64, String)> = listing
        .as_array()
        .unwrap_or_else(|| panic!("`checkpoints --json` is no list: {listing}"))
        .iter()
        .map(|c| {
            (
                c["step"].as_u64().unwrap_or_else(|| panic!("{c}")),
                c["name"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{c}"))
                    .to_string(),
            )
        })
        .collect();
    named.sort();
    named.dedup_by(|a, b| a.1 == b.1);
    (run, named.into_iter().map(|(_, n)| n).collect())
}

fn seq_len(run: &Path) -> usize {
    // The run's own config.yaml: the window the trainer cut, seq_len + 1 tokens.
    let config = fs::read_to_string(run.join("config.yaml")).unwrap();
    config
        .lines()
        .find_map(|l| l.trim().strip_prefix("seq_len:"))
        .expect("training.seq_len in the run's config.yaml")
        .trim()
        .parse()
        .unwrap()
}

/// `lavenderd attribute --json` with one query (and `extra` arguments): the
/// report, the progress objects on stderr, and the time it took.
fn attribute(
    root: &Path,
    run: &Path,
    query: &str,
    dir: &Path,
    extra: &[String],
) -> (Value, Vec<Value>, f64) {
    let queries = dir.join(format!("query-{}.jsonl", query.len()));
    fs::write(
        &queries,
        serde_json::json!({ "text": query }).to_string() + "\n",
    )
    .unwrap();
    let t = Instant::now();
    let (stdout, stderr) = run_ok(
        lavenderd(root)
            .arg("attribute")
            .arg("--run")
            .arg(run)
            .arg("--queries")
            .arg(&queries)
            .args(["--top", "5", "--json"])
            .args(extra),
    );
    let took = t.elapsed().as_secs_f64();
    // Only lavenderd's own lines on the terminal, and its progress: no library's.
    let mut progress = Vec::new();
    for line in stderr.lines() {
        if line.starts_with('{') {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["event"], "progress", "{line}");
            progress.push(v);
        } else {
            assert!(
                line.starts_with("attribute: ") || line.starts_with("data root: "),
                "a foreign line on the terminal: {line}"
            );
        }
    }
    eprintln!("{}", stderr.trim_end());
    (serde_json::from_str(&stdout).unwrap(), progress, took)
}

/// The run's pretraining windows, all shards: what `--windows` samples from.
fn all_windows(data_root: &Path, seq_len: usize) -> usize {
    let index = TokenIndex::read(&data_root.join("tokens")).unwrap();
    index
        .pretrain
        .shards
        .iter()
        .map(|shard| {
            let ids = tokens::read_array(&data_root.join("tokens").join(&shard.file), index.dtype)
                .unwrap();
            tokens::pretrain_window_starts(ids.len(), seq_len).count()
        })
        .sum()
}

/// The window's document ranks first, through the window itself; `every`: the
/// spacing of the windows scored.
fn ranks_first(report: &Value, window: &str, document: &str, seq_len: usize, every: usize) {
    let windows = &report["train_windows"];
    assert_eq!(
        windows["tokens"].as_u64(),
        Some(seq_len as u64 + 1),
        "{windows}"
    );
    assert!(windows["of"].as_u64().unwrap() > 1000, "{windows}");
    assert_eq!(windows["every"].as_u64(), Some(every as u64), "{windows}");
    let of = windows["of"].as_u64().unwrap() as usize;
    assert_eq!(
        windows["count"].as_u64(),
        Some(of.div_ceil(every) as u64),
        "{windows}"
    );
    let top = &report["queries"][0]["top"];
    for r in top.as_array().unwrap() {
        let w = &r["window"];
        eprintln!(
            "#{} score {} shard-00000.jsonl:{} window {} (tokens {}..{}): {:?}",
            r["rank"],
            r["score"],
            r["document"]["line"],
            w["index"],
            w["start"],
            w["end"],
            w["text"]
        );
    }
    let first = &top[0];
    assert_eq!(
        first["text"].as_str(),
        Some(document),
        "the window's document ranks first: {top:#}"
    );
    let w = &first["window"];
    assert_eq!(w["text"].as_str(), Some(window), "{w:#}");
    assert_eq!(w["index"].as_u64().unwrap() as usize % every, 0, "{w:#}");
    assert_eq!(
        w["end"].as_u64().unwrap() - w["start"].as_u64().unwrap(),
        seq_len as u64 + 1,
        "{w:#}"
    );
    let [from, to] =
        [&w["document_chars"][0], &w["document_chars"][1]].map(|v| v.as_u64().unwrap() as usize);
    let chars: String = document.chars().skip(from).take(to - from).collect();
    assert_eq!(
        chars, window,
        "the window's character offsets in its document"
    );
}

/// The progress objects name every pass of the plan, each run to its end.
fn passes_reported(progress: &[Value], passes: u64) {
    let last = progress.last().expect("progress on stderr");
    assert_eq!(last["passes"], passes, "{last}");
    assert_eq!(last["pass"], passes, "{last}");
    assert_eq!(last["done"], last["total"], "{last}");
    for pass in 1..=passes {
        assert!(
            progress
                .iter()
                .any(|p| p["pass"] == pass && p["done"] == p["total"]),
            "pass {pass} never reported done: {progress:#?}"
        );
    }
    assert!(
        progress
            .iter()
            .any(|p| p["eta_s"].is_u64() && p["rows_per_s"].is_f64()),
        "{progress:#?}"
    );
}

/// The pipeline, `export` of `keep` checkpoints (the newest; all when `None`),
/// then a cold `attribute` (on a sample of at most `sample` windows, all when
/// `None`) and, when `warm`, a second one on its cache.
fn attribution_on_the_default_pipeline(keep: Option<usize>, sample: Option<usize>, warm: bool) {
    require_bergson();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data-root");
    let (run, names) = default_pipeline(&root);
    let mut export = lavenderd(&root);
    export.arg("export").arg("--run").arg(&run);
    let exported = match keep {
        None => {
            export.arg("--all");
            names.len()
        }
        Some(k) => {
            assert!(names.len() >= k, "{names:?}");
            export.arg("--checkpoints").args(&names[names.len() - k..]);
            k
        }
    };
    run_ok(&mut export);
    let seq_len = seq_len(&run);
    let (every, extra) = match sample {
        // `--windows n` keeps every k-th window, k = ⌈all / n⌉.
        Some(n) => (
            all_windows(&root, seq_len).div_ceil(n),
            vec!["--windows".to_string(), n.to_string()],
        ),
        None => (1, Vec::new()),
    };
    let asked = windows_inside_a_document(&root, seq_len, 2, every);

    // Cold: every pass, then the Hessian passes cached.
    let (report, progress, cold) = attribute(&root, &run, &asked[0].0, tmp.path(), &extra);
    eprintln!("lavenderd attribute, cold, {exported} checkpoints: {cold:.0} s");
    ranks_first(&report, &asked[0].0, &asked[0].1, seq_len, every);
    assert_eq!(report["checkpoints"].as_array().unwrap().len(), exported);
    assert_eq!(
        report["hessians"]["cache"], "computed",
        "{}",
        report["hessians"]
    );
    assert_eq!(report["batch_tokens"], 4096);
    let entry = PathBuf::from(report["hessians"]["dir"].as_str().unwrap());
    assert_eq!(
        entry.parent(),
        Some(run.join("attribution/cache").as_path())
    );
    assert!(entry.join("inputs.json").is_file());
    // Covariances and eigenvalue correction per checkpoint, the query, scoring.
    passes_reported(&progress, 3 * exported as u64 + 1);

    if !warm {
        return;
    }
    // Warm: another query, the query's part only, in a fresh folder.
    let (again, progress, warm) = attribute(&root, &run, &asked[1].0, tmp.path(), &extra);
    eprintln!("lavenderd attribute, warm (Hessians cached): {warm:.0} s");
    ranks_first(&again, &asked[1].0, &asked[1].1, seq_len, every);
    assert_eq!(
        again["hessians"]["cache"], "reused",
        "{}",
        again["hessians"]
    );
    assert_eq!(again["hessians"]["dir"].as_str(), entry.to_str());
    assert_ne!(again["scores"], report["scores"]);
    passes_reported(&progress, exported as u64 + 1);
    let source = PathBuf::from(again["scores"].as_str().unwrap());
    let source = source.parent().unwrap();
    assert!(source.join("segment_0/kfac").is_symlink());
    assert!(!source.join("segment_0/query_grad_segment").is_symlink());
}

#[test]
fn at_two_checkpoints_a_verbatim_training_window_ranks_its_document_first() {
    attribution_on_the_default_pipeline(Some(2), Some(1000), false);
}

#[cfg(feature = "attribution-tests")]
#[test]
fn at_every_checkpoint_a_verbatim_training_window_ranks_its_document_first_and_the_next_query_reuses_the_hessians()
 {
    attribution_on_the_default_pipeline(None, None, true);
}
