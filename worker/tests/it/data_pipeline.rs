//! Every data step before training on the embedded corpus at tiny scale, then again
//! (skipped).

use std::time::Instant;

use lavender::pipeline_step::{PipelineStep, names_through};
use lavender_testkit::data_steps::{Root, docs};

fn u16s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
        .collect()
}

#[test]
fn the_data_steps_on_the_embedded_corpus_at_tiny_scale() {
    let root = Root::new();
    let run = root.run_dir();
    let run_arg = run.to_str().unwrap();
    let started = Instant::now();
    for step in names_through(PipelineStep::Precompute) {
        root.ok(step, &["--scale", "tiny", "--run-dir", run_arg]);
    }
    eprintln!("the data steps at tiny scale took {:?}", started.elapsed());

    // Counts come from the manifests, where status reads them.
    let docs_loaded = root.count("corpus", "documents");
    assert!(
        docs_loaded > 7000,
        "tinyshakespeare has ~7.2k speeches, got {docs_loaded}"
    );
    assert_eq!(root.count("corpus", "sources"), 1);
    let kept = root.count("corpus/dedup", "documents");
    assert_eq!(kept + root.count("corpus/dedup", "removed"), docs_loaded);
    let shards = root.count("shards", "shard_count");
    assert!(shards >= 1, "{shards} shards");
    assert_eq!(
        root.count("shards", "train_documents") + root.count("shards", "validation_documents"),
        root.count("corpus/filtered", "documents")
    );
    assert_eq!(root.count("tokens", "vocab_size"), 2048);
    assert!(root.count("tokens", "tokens") > 100_000);
    assert!(root.count("tokens", "sft_samples") > 1000);
    assert!(root.count("tokens", "dpo_pairs") > 1000);
    assert_eq!(root.count("tokens", "shards_available"), shards);
    let used = root.count("tokens", "shards_used");
    assert!(
        used >= 1 && used <= shards,
        "{used} of {shards} shards used"
    );

    // Milestones, in order.
    let events = root.events();
    let messages: Vec<&str> = events
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "data_loaded",
            "dataset_built",
            "tokenizer_ready",
            "dataset_built",
            "dataset_built",
            "dataset_built"
        ],
        "{messages:#?}"
    );
    assert!(messages[0].starts_with(&format!(
        "data loaded: {} docs from 1 sources",
        group(docs_loaded)
    )));
    assert_eq!(events[2]["vocab_size"], 2048);
    assert!(messages[3].starts_with(&format!("pretrain tokenisation done: {shards} chunks")));
    assert!(messages[4].starts_with("SFT tokenisation done: "));
    assert!(messages[5].starts_with("DPO tokenisation done: "));
    for e in &events {
        assert!(e["ts"].as_str().unwrap().ends_with('Z'));
    }

    // The tokenizer loads with the tokenizers crate and round-trips text exactly.
    let tokens_dir = root.data().join("tokens");
    let tok = tokenizers::Tokenizer::from_file(tokens_dir.join("tokenizer.json")).unwrap();
    for text in [
        "First Citizen:\nBefore we proceed any further, hear me speak.",
        "  leading spaces, tabs\tand\r\nCRLF; ünïcødé ✓ 漢字 🙂 <|endoftext|> trailing  ",
    ] {
        let ids = tok.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
    }

    // The first shard's array is its documents' tokens, each followed by eos.
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tokens_dir.join("index.json")).unwrap())
            .unwrap();
    assert_eq!(index["format"], 1);
    assert_eq!(index["dtype"], "u16");
    let eos = index["eos_id"].as_u64().unwrap() as u32;
    // Every chunk of the tiny run trains on most of the corpus: a chunk of a few
    // thousand tokens is learnt by heart and its validation loss stalls.
    let selection = &root.manifest("tokens")["selection"]["shards"];
    let shard_tokens = |name: &serde_json::Value| {
        index["pretrain"]["shards"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| &s["shard"] == name)
            .unwrap()["tokens"]
            .as_u64()
            .unwrap()
    };
    let chunk_tokens: u64 = selection.as_array().unwrap().iter().map(shard_tokens).sum();
    let all_tokens = root.count("tokens", "tokens");
    assert!(
        chunk_tokens * 10 >= all_tokens * 9,
        "tiny's chunk 1 trains on {chunk_tokens} of {all_tokens} tokens"
    );
    let first = &index["pretrain"]["shards"][0];
    assert_eq!(first["shard"], "shard-00000");
    let ids = u16s(&std::fs::read(tokens_dir.join(first["file"].as_str().unwrap())).unwrap());
    assert_eq!(ids.len() as u64, first["tokens"].as_u64().unwrap());
    let shard_docs = docs(&root.data().join("shards/shard-00000.jsonl"));
    assert_eq!(ids.iter().filter(|&&t| t == eos).count(), shard_docs.len());
    let end = ids.iter().position(|&t| t == eos).unwrap();
    assert_eq!(tok.decode(&ids[..end], false).unwrap(), shard_docs[0]);

    // An SFT record: prompt then response (ending in eos), at the offset its .idx gives.
    let idx = std::fs::read(tokens_dir.join("sft/train.idx")).unwrap();
    let rec: Vec<u64> = idx[..24]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let bin = u16s(&std::fs::read(tokens_dir.join("sft/train.bin")).unwrap());
    let (off, p, r) = (rec[0] as usize, rec[1] as usize, rec[2] as usize);
    let prompt = tok.decode(&bin[off..off + p], false).unwrap();
    let response = &bin[off + p..off + p + r];
    assert_eq!(*response.last().unwrap(), eos);
    let response = tok.decode(&response[..r - 1], false).unwrap();
    let filtered = docs(&root.data().join("corpus/filtered/documents.jsonl"));
    let at = filtered
        .iter()
        .position(|d| format!("{d}\n\n") == prompt)
        .expect("prompt is a corpus speech");
    assert_eq!(
        response,
        filtered[at + 1],
        "the response is the next speech"
    );

    // A second run with nothing changed skips every step: it says so and writes
    // nothing (every file under the data root as it was: size and mtime). How fast
    // a skip is belongs to a benchmark, not to this test.
    let before = files(&root.data());
    assert!(
        before
            .iter()
            .any(|(p, ..)| p.ends_with("tokens/index.json"))
    );
    for step in names_through(PipelineStep::Precompute) {
        let (out, _) = root.run(step, &["--scale", "tiny", "--run-dir", run_arg]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("up to date"), "{step} did not skip: {err}");
        assert_eq!(files(&root.data()), before, "{step} wrote while skipping");
    }
    assert_eq!(
        root.events().len(),
        events.len(),
        "skipped steps announce no milestones"
    );
}

/// Every file under `dir`: its path, size and modification time.
fn files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                todo.push(e.path());
            } else {
                out.push((e.path(), meta.len(), meta.modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
