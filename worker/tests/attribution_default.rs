//! Attribution on the pipeline the README starts, as a user runs it: `lavenderd start
//! --scale tiny --foreground` on a fresh data root (the embedded corpus and the
//! default config, what `make run` does), `lavenderd export --all`, then
//! `lavenderd attribute --from-run` with a query that is, verbatim, one of the
//! run's training windows (a window that lies inside one document). Its document
//! must rank first, the report must give the winning window's text and offsets, and
//! nothing but lavenderd's own lines may reach the terminal.
//!
//! SOURCE over the whole training split (5,574 windows, five checkpoints) takes
//! about half an hour on two cores, so this test is not part of `make test`:
//! `make test-attribution` runs it (docs/ATTRIBUTION.md). It needs bergson in the
//! project's .venv (`bash scripts/attribution-setup.sh`) and fails, naming the fix,
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

/// A training window of the run's chunk that lies inside one document (no
/// end-of-text token in it): its text, and the document it belongs to.
fn a_window_inside_a_document(data_root: &Path, seq_len: usize) -> (String, String) {
    let index = TokenIndex::read(&data_root.join("tokens")).unwrap();
    let shard = &index.pretrain.shards[0];
    let ids = tokens::read_array(&data_root.join("tokens").join(&shard.file), index.dtype).unwrap();
    let bytes = TokenBytes::read(&data_root.join("tokens/tokenizer.json")).unwrap();
    // Windows in the trainer's cut; take one from the middle of the shard.
    let starts: Vec<usize> = tokens::pretrain_window_starts(ids.len(), seq_len).collect();
    let start = starts[starts.len() / 2..]
        .iter()
        .copied()
        .find(|&s| {
            !ids[s..=s + seq_len].contains(&index.eos_id)
                // Not at a document's first token (the previous one is its EOT),
                // so the window is a document's middle.
                && s > 0
                && ids[s - 1] != index.eos_id
        })
        .expect("a window inside one document");
    let text: Vec<u8> = ids[start..=start + seq_len]
        .iter()
        .flat_map(|&id| bytes.of(id).to_vec())
        .collect();
    let text = String::from_utf8(text).expect("a window of whole characters");
    // Its document: the shard's text documents, in order, hold the window's text.
    let docs = fs::read_to_string(
        data_root
            .join("shards")
            .join(format!("{}.jsonl", shard.shard)),
    )
    .unwrap();
    let holders: Vec<String> = docs
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .filter(|d| d.contains(&text))
        .collect();
    assert_eq!(holders.len(), 1, "one document holds {text:?}: {holders:?}");
    (text, holders[0].clone())
}

#[test]
fn a_verbatim_training_window_of_the_default_pipeline_ranks_its_document_first() {
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

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data-root");
    let t = Instant::now();
    run_ok(lavenderd(&root).args(["start", "--scale", "tiny", "--foreground"]));
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
    let run = &runs[0];
    run_ok(
        lavenderd(&root)
            .arg("export")
            .arg("--run")
            .arg(run)
            .arg("--all"),
    );

    // The run's own config.yaml: the window the trainer cut, seq_len + 1 tokens.
    let config = fs::read_to_string(run.join("config.yaml")).unwrap();
    let seq_len: usize = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("seq_len:"))
        .expect("training.seq_len in the run's config.yaml")
        .trim()
        .parse()
        .unwrap();
    let (window, document) = a_window_inside_a_document(&root, seq_len);
    let queries = tmp.path().join("queries.jsonl");
    fs::write(
        &queries,
        serde_json::json!({ "text": window }).to_string() + "\n",
    )
    .unwrap();

    let t = Instant::now();
    let (stdout, stderr) = run_ok(
        lavenderd(&root)
            .arg("attribute")
            .arg("--run")
            .arg(run)
            .arg("--queries")
            .arg(&queries)
            .args(["--top", "5", "--json"]),
    );
    let took = t.elapsed();
    eprintln!(
        "lavenderd attribute on the tiny run: {:.0} s",
        took.as_secs_f64()
    );
    // Only lavenderd's own lines on the terminal: no library's warning.
    for line in stderr.lines() {
        assert!(
            line.starts_with("attribute: "),
            "a foreign line on the terminal: {line}"
        );
    }
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let windows = &report["train_windows"];
    assert_eq!(
        windows["tokens"].as_u64(),
        Some(seq_len as u64 + 1),
        "{windows}"
    );
    assert!(windows["count"].as_u64().unwrap() > 1000, "{windows}");
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
        Some(document.as_str()),
        "the window's document ranks first: {top:#}"
    );
    let w = &first["window"];
    assert_eq!(w["text"].as_str(), Some(window.as_str()), "{w:#}");
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
