//! dedup, filter, build_shards, stats and precompute on small inputs: what each
//! removes, keeps and counts, when each reruns, and the shard selection of every
//! (chunk, scale).

use lavender::pipeline_step::{PipelineStep, names_through};
use std::path::PathBuf;

use lavender_testkit::data_steps::{Root, docs, path_config};

/// A source directory with one file of the given documents (blank-line separated).
fn corpus(root: &Root, documents: &[&str]) -> PathBuf {
    let src = root.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("corpus.txt"), documents.join("\n\n")).unwrap();
    src
}

#[test]
fn dedup_removes_exact_duplicate_documents_and_counts_them() {
    let root = Root::new();
    let src = corpus(
        &root,
        &[
            "A:\nhello",
            "B:\nworld",
            "A:\nhello",
            "C:\nagain",
            "B:\nworld",
        ],
    );
    root.config(&path_config(&src, ""));
    root.ok("downloads", &[]);
    let err = root.ok("dedup", &[]);
    assert!(err.contains("2 duplicates removed"), "{err}");
    assert_eq!(root.count("corpus/dedup", "documents"), 3);
    assert_eq!(root.count("corpus/dedup", "removed"), 2);
    assert_eq!(
        docs(&root.data().join("corpus/dedup/documents.jsonl")),
        ["A:\nhello", "B:\nworld", "C:\nagain"]
    );
}

#[test]
fn paragraph_dedup_drops_repeated_paragraphs_inside_documents() {
    let root = Root::new();
    let src = corpus(
        &root,
        &["intro\n\nbody one\n\nfooter", "intro\n\nbody two\n\nfooter"],
    );
    std::fs::write(
        src.join("corpus.txt"),
        "intro\n\nbody one\n\nfooter\n===\nintro\n\nbody two\n\nfooter\n===\nfooter",
    )
    .unwrap();
    root.config(&path_config(
        &src,
        "  document_separator: \"\\n===\\n\"\n  dedup: {paragraphs: true}\n",
    ));
    root.ok("downloads", &[]);
    root.ok("dedup", &[]);
    assert_eq!(
        docs(&root.data().join("corpus/dedup/documents.jsonl")),
        ["intro\n\nbody one\n\nfooter", "body two"]
    );
    assert_eq!(root.count("corpus/dedup", "removed_paragraphs"), 3);
    // The last document had nothing new left.
    assert_eq!(root.count("corpus/dedup", "removed"), 1);
}

#[test]
fn filter_counts_removals_per_rule() {
    let root = Root::new();
    let src = corpus(
        &root,
        &[
            "A:\nA perfectly fine speech.",
            "tiny",
            &format!("A:\n{}", "long ".repeat(100)),
            "A:\nbell \u{7}\u{7}\u{7}\u{7}\u{7}\u{7}",
            "la la\nla la\nla la\nla la",
            "B:\nAnother fine one.",
        ],
    );
    root.config(&path_config(
        &src,
        "  filter: {min_chars: 10, max_chars: 200, max_nonprintable_ratio: 0.1, max_repeated_line_ratio: 0.5}\n",
    ));
    for step in names_through(PipelineStep::Filter) {
        root.ok(step, &[]);
    }
    assert_eq!(root.count("corpus/filtered", "documents"), 2);
    assert_eq!(root.count("corpus/filtered", "removed"), 4);
    for rule in ["min_chars", "max_chars", "nonprintable", "repeated_lines"] {
        assert_eq!(
            root.count("corpus/filtered", &format!("removed_{rule}")),
            1,
            "{rule}"
        );
    }
}

#[test]
fn filter_that_removes_everything_is_an_error_and_keeps_the_old_output() {
    let root = Root::new();
    let src = corpus(&root, &["A:\nfine speech here", "B:\nanother one"]);
    root.config(&path_config(&src, ""));
    for step in names_through(PipelineStep::Filter) {
        root.ok(step, &[]);
    }
    let before = root.manifest("corpus/filtered");
    let err = root.fails("filter", &["--set", "data.filter.min_chars=1000"]);
    assert!(
        err.contains("filter removed every document") && err.contains("min_chars 2"),
        "{err}"
    );
    assert_eq!(root.manifest("corpus/filtered"), before);
    assert_eq!(
        docs(&root.data().join("corpus/filtered/documents.jsonl")).len(),
        2
    );
}

fn many_docs(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                "Speaker {}:\nThis is speech number {i}, with some words.",
                i % 5
            )
        })
        .collect()
}

/// A data root of 400 documents (also returned), configured for 2,000-byte shards
/// and a tenth of them for validation.
fn sharded_root() -> (Root, Vec<String>) {
    let root = Root::new();
    let texts = many_docs(400);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let src = corpus(&root, &refs);
    root.config(&path_config(
        &src,
        "  shards: {shard_bytes: 2000, validation_fraction: 0.1}\n",
    ));
    (root, texts)
}

#[test]
fn build_shards_packs_fixed_size_shards_with_a_deterministic_split() {
    let (root, texts) = sharded_root();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    for step in names_through(PipelineStep::BuildShards) {
        root.ok(step, &[]);
    }
    let m = root.manifest("shards");
    let shards = m["shards"].as_array().unwrap();
    assert_eq!(shards.len() as u64, root.count("shards", "shard_count"));
    assert!(shards.len() >= 8, "{} shards", shards.len());
    let mut all = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        assert_eq!(s["shard"], format!("shard-{i:05}"));
        let path = root.data().join("shards").join(s["file"].as_str().unwrap());
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(s["bytes"].as_u64().unwrap(), bytes.len() as u64);
        assert!(
            bytes.len() <= 2000 + 200,
            "shard {i} is {} bytes",
            bytes.len()
        );
        let digest: String = <sha2::Sha256 as sha2::Digest>::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(s["sha256"], digest);
        let d = docs(&path);
        assert_eq!(s["documents"].as_u64().unwrap(), d.len() as u64);
        all.extend(d);
    }
    let validation = docs(&root.data().join("shards/validation.jsonl"));
    assert!(
        (20..=60).contains(&validation.len()),
        "{} validation docs",
        validation.len()
    );
    assert_eq!(all.len() + validation.len(), 400);
    assert!(validation.iter().all(|v| !all.contains(v)));

    // The split depends on each document's content, not on the order documents come in.
    let other = Root::new();
    let mut reversed = refs.clone();
    reversed.reverse();
    let src2 = corpus(&other, &reversed);
    other.config(&path_config(
        &src2,
        "  shards: {shard_bytes: 2000, validation_fraction: 0.1}\n",
    ));
    for step in names_through(PipelineStep::BuildShards) {
        other.ok(step, &[]);
    }
    let mut v1 = validation.clone();
    let mut v2 = docs(&other.data().join("shards/validation.jsonl"));
    v1.sort();
    v2.sort();
    assert_eq!(v1, v2);
}

#[test]
fn shards_used_and_available_are_recorded_for_every_chunk_and_scale() {
    let root = Root::new();
    let texts = many_docs(2000);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let src = corpus(&root, &refs);
    root.config(&path_config(
        &src,
        "  shards: {shard_bytes: 1500, validation_fraction: 0.05}\n",
    ));
    for step in names_through(PipelineStep::BuildShards) {
        root.ok(step, &[]);
    }
    let available = root.count("shards", "shard_count");
    assert!(
        available > 81,
        "need more shards than the large preset, got {available}"
    );
    for (scale, preset) in [("tiny", 4u64), ("small", 21), ("medium", 43), ("large", 81)] {
        let mut union: Vec<String> = Vec::new();
        for chunk in ["1", "2", "3", "4"] {
            let err = root.ok("build_shards", &["--scale", scale, "--chunk", chunk]);
            assert!(err.contains("up to date"), "{err}");
            let m = root.manifest("shards");
            assert_eq!(root.count("shards", "shards_available"), available);
            let used: Vec<String> = m["selection"]["shards"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect();
            assert_eq!(root.count("shards", "shards_used"), used.len() as u64);
            assert_eq!(m["selection"]["scale"], scale);
            // Every used name is a shard of the manifest.
            let names: Vec<&str> = m["shards"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["shard"].as_str().unwrap())
                .collect();
            assert!(used.iter().all(|u| names.contains(&u.as_str())), "{used:?}");
            union.extend(used);
        }
        let n = union.len();
        union.sort();
        union.dedup();
        assert_eq!(union.len(), n, "chunks of {scale} overlap");
        assert_eq!(
            union.len() as u64,
            preset,
            "the chunks of {scale} together use its preset"
        );
    }
}

#[test]
fn steps_rerun_when_their_config_or_inputs_change_and_with_force() {
    let root = Root::new();
    let texts = many_docs(50);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let src = corpus(&root, &refs);
    root.config(&path_config(&src, ""));
    for step in names_through(PipelineStep::Filter) {
        root.ok(step, &[]);
    }
    assert!(root.ok("filter", &[]).contains("up to date"));
    assert!(!root.ok("filter", &["--force"]).contains("up to date"));
    // What `lavenderd start --force` gives the steps it runs again.
    let forced = root
        .cmd("filter", &[])
        .env("LAVENDER_FORCE", "true")
        .output()
        .unwrap();
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    assert!(!String::from_utf8_lossy(&forced.stderr).contains("up to date"));
    // A changed rule reruns filter.
    let err = root.ok("filter", &["--set", "data.filter.min_chars=53"]);
    assert!(!err.contains("up to date"), "{err}");
    assert_eq!(
        root.count("corpus/filtered", "removed_min_chars"),
        10,
        "speeches 0-9 are one character short"
    );
    // A changed source file reruns downloads, and dedup sees new inputs.
    std::fs::write(src.join("corpus.txt"), "Only:\none document now").unwrap();
    assert!(!root.ok("downloads", &[]).contains("up to date"));
    assert!(!root.ok("dedup", &[]).contains("up to date"));
    assert_eq!(root.count("corpus/dedup", "documents"), 1);
}

#[test]
fn precompute_uses_user_sft_and_dpo_jsonl_when_configured() {
    let root = Root::new();
    let texts = many_docs(300);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let src = corpus(&root, &refs);
    let sft = root.path().join("sft.jsonl");
    let dpo = root.path().join("dpo.jsonl");
    let mut sft_lines = String::new();
    let mut dpo_lines = String::new();
    for i in 0..40 {
        sft_lines.push_str(&format!(
            "{{\"messages\":[{{\"role\":\"user\",\"content\":\"question {i}\"}},{{\"role\":\"assistant\",\"content\":\"answer {i}\"}}]}}\n"
        ));
        dpo_lines.push_str(&format!(
            "{{\"prompt\":\"p{i}\",\"chosen\":\"good {i}\",\"rejected\":\"bad {i}\"}}\n"
        ));
    }
    std::fs::write(&sft, sft_lines).unwrap();
    std::fs::write(&dpo, dpo_lines).unwrap();
    root.config(&path_config(
        &src,
        &format!(
            "  sft_jsonl: {}\n  dpo_jsonl: {}\n  heldout_fraction: 0.2\n  tokenizer: {{vocab_size: 300, min_frequency: 2}}\n",
            sft.display(),
            dpo.display()
        ),
    ));
    for step in names_through(PipelineStep::Precompute) {
        root.ok(step, &[]);
    }
    let (s, sh) = (
        root.count("tokens", "sft_samples"),
        root.count("tokens", "sft_heldout"),
    );
    let (d, dh) = (
        root.count("tokens", "dpo_pairs"),
        root.count("tokens", "dpo_heldout"),
    );
    assert_eq!(s + sh, 40);
    assert_eq!(d + dh, 40);
    assert!(sh > 0 && dh > 0, "some samples are held out");
    assert_eq!(root.count("tokens", "vocab_size"), 300);

    // A bad line names the file and line, and the previous tokens stay.
    std::fs::write(&dpo, "{\"prompt\":\"p\",\"chosen\":\"c\"}\n").unwrap();
    let err = root.fails("precompute", &[]);
    assert!(err.contains("dpo.jsonl:1"), "{err}");
    assert_eq!(root.count("tokens", "dpo_pairs"), d);
}

#[test]
fn near_duplicate_removal_is_behind_its_switch() {
    let root = Root::new();
    let base: Vec<String> = (0..60).map(|i| format!("word{i}")).collect();
    let original = format!("A:\n{}", base.join(" "));
    let near = original.replace("word30", "changed");
    let other = format!(
        "B:\n{}",
        (0..60)
            .map(|i| format!("other{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let src = corpus(&root, &[&original, &near, &other]);
    root.config(&path_config(&src, ""));
    root.ok("downloads", &[]);
    root.ok("dedup", &[]);
    assert_eq!(root.count("corpus/dedup", "documents"), 3, "off by default");

    let err = root.ok("dedup", &["--set", "data.dedup.near_duplicates=true"]);
    assert!(err.contains("1 of them near duplicates"), "{err}");
    assert_eq!(root.count("corpus/dedup", "removed_near_duplicates"), 1);
    assert_eq!(
        docs(&root.data().join("corpus/dedup/documents.jsonl")),
        [original, other]
    );
}

#[test]
fn a_rerun_that_changes_nothing_does_not_cascade() {
    let root = Root::new();
    let texts = many_docs(30);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let src = corpus(&root, &refs);
    root.config(&path_config(&src, ""));
    for step in names_through(PipelineStep::Filter) {
        root.ok(step, &[]);
    }
    let err = root.ok("downloads", &["--force"]);
    assert!(err.contains("1 of 1 outputs unchanged"), "{err}");
    assert!(root.ok("dedup", &[]).contains("up to date"));

    // A touched source (same bytes, new mtime) reruns downloads, and only downloads.
    let f = std::fs::File::options()
        .write(true)
        .open(src.join("corpus.txt"))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    assert!(!root.ok("downloads", &[]).contains("up to date"));
    assert!(root.ok("dedup", &[]).contains("up to date"));

    // dedup forced with the same result leaves filter fresh too.
    root.ok("dedup", &["--force"]);
    assert!(root.ok("filter", &[]).contains("up to date"));
}

#[test]
fn stats_counts_what_the_chunks_shards_hold_and_the_status_shows_it() {
    let (root, _) = sharded_root();
    let chunk2 = ["--scale", "small", "--chunk", "2"];
    for step in names_through(PipelineStep::Stats) {
        root.ok(step, &chunk2);
    }

    // The chunk's shards as build_shards chose them, read back from the disk.
    let built = root.manifest("shards");
    let chosen: Vec<&str> = built["selection"]["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(chosen.len() >= 2, "{chosen:?}");
    let (mut documents, mut words, mut sizes) = (0u64, 0u64, Vec::new());
    for name in &chosen {
        let path = root.data().join("shards").join(format!("{name}.jsonl"));
        let d = docs(&path);
        documents += d.len() as u64;
        words += d
            .iter()
            .map(|t| t.split_whitespace().count() as u64)
            .sum::<u64>();
        sizes.push(std::fs::metadata(&path).unwrap().len());
    }
    let m = root.manifest("stats");
    assert_eq!(m["chunk"], 2);
    assert_eq!(m["scale"], "small");
    let per_shard: Vec<&str> = m["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["shard"].as_str().unwrap())
        .collect();
    assert_eq!(per_shard, chosen);
    let want = [
        ("documents", documents),
        ("words", words),
        ("shards", chosen.len() as u64),
        ("shard_bytes", sizes.iter().sum()),
        ("shard_bytes_min", *sizes.iter().min().unwrap()),
        ("shard_bytes_max", *sizes.iter().max().unwrap()),
    ];
    for (key, value) in want {
        assert_eq!(root.count("stats", key), value, "{key}");
    }
    let st = root.status();
    for (key, value) in want {
        assert_eq!(st["data"][format!("stats_{key}")], value, "{key}: {st:#}");
    }

    // Unchanged inputs skip it; another chunk counts that chunk.
    assert!(root.ok("stats", &chunk2).contains("up to date"));
    let err = root.ok("stats", &["--scale", "small", "--chunk", "3"]);
    assert!(!err.contains("up to date"), "{err}");
    assert_eq!(root.manifest("stats")["chunk"], 3);

    // A shard changed behind build_shards' back, or its manifest damaged: a failure
    // naming the file and what to do, and the earlier counts stay.
    let before = root.manifest("stats");
    let shard = root
        .data()
        .join("shards")
        .join(format!("{}.jsonl", chosen[0]));
    let mut changed = std::fs::read(&shard).unwrap();
    changed.extend_from_slice(b"{\"text\":\"one more\"}\n");
    std::fs::write(&shard, changed).unwrap();
    let err = root.fails("stats", &chunk2);
    assert!(
        err.contains(&shard.display().to_string())
            && err.contains("changed after build_shards wrote it")
            && err.contains("rerun `lavender-worker build_shards --force`"),
        "{err}"
    );
    std::fs::write(root.data().join("shards/manifest.json"), "{\"step\": \"bui").unwrap();
    let err = root.fails("stats", &chunk2);
    assert!(
        err.contains("shards/manifest.json is malformed")
            && err.contains("rerun `lavender-worker build_shards --force`"),
        "{err}"
    );
    assert_eq!(root.manifest("stats"), before);
}
