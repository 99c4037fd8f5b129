//! `downloads`: local files and directories, URL sources against a real HTTP server on
//! loopback (with Range resume and checksum verification), and bad input.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use lavender_testkit::data_steps::{Root, docs, listing, path_config};
use sha2::{Digest, Sha256};

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A loopback HTTP/1.1 server serving `body` at `/corpus.txt`, honouring `Range: bytes=N-`
/// unless `ignore_range`. Records each request's Range header. Runs until the test ends.
struct Server {
    url: String,
    ranges: Arc<Mutex<Vec<Option<String>>>>,
}

fn serve(body: Vec<u8>, ignore_range: bool) -> Server {
    serve_shared(Arc::new(Mutex::new(body)), ignore_range)
}

fn serve_shared(body: Arc<Mutex<Vec<u8>>>, ignore_range: bool) -> Server {
    serve_with(body, ignore_range, 0)
}

/// As [`serve_shared`]; the first `cut_first` responses stop half-way through the body
/// and close the connection, as a dropped network connection does.
fn serve_with(body: Arc<Mutex<Vec<u8>>>, ignore_range: bool, cut_first: usize) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/corpus.txt", listener.local_addr().unwrap());
    let ranges = Arc::new(Mutex::new(Vec::new()));
    let seen = ranges.clone();
    std::thread::spawn(move || {
        let mut cuts_left = cut_first;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut range = None;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("range:") {
                    range = Some(v.trim().to_string());
                }
            }
            seen.lock().unwrap().push(range.clone());
            let body = body.lock().unwrap().clone();
            if !request_line.contains(" /corpus.txt ") {
                let _ = stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                continue;
            }
            let start = range.filter(|_| !ignore_range).and_then(|r| {
                r.strip_prefix("bytes=")?
                    .strip_suffix('-')?
                    .parse::<usize>()
                    .ok()
            });
            let (status, part) = match start {
                Some(s) if s >= body.len() => ("416 Range Not Satisfiable", &body[..0]),
                Some(s) => ("206 Partial Content", &body[s..]),
                None => ("200 OK", &body[..]),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                part.len()
            );
            let _ = stream.write_all(head.as_bytes());
            if cuts_left > 0 {
                cuts_left -= 1;
                let _ = stream.write_all(&part[..part.len() / 2]);
                let _ = stream.flush();
                continue; // dropping the stream closes the connection mid-body
            }
            let _ = stream.write_all(part);
        }
    });
    Server { url, ranges }
}

fn url_config(url: &str, sha256: &str) -> String {
    format!("data:\n  sources:\n    - url: {url}\n      sha256: \"{sha256}\"\n")
}

fn corpus_text() -> Vec<u8> {
    (0..200)
        .map(|i| {
            format!(
                "Speaker {}:\nLine number {i} of the downloaded corpus.\n\n",
                i % 7
            )
        })
        .collect::<String>()
        .into_bytes()
}

#[test]
fn url_source_is_downloaded_and_verified() {
    let body = corpus_text();
    let server = serve(body.clone(), false);
    let root = Root::new();
    root.config(&url_config(&server.url, &sha(&body)));
    root.ok("downloads", &[]);
    assert_eq!(
        std::fs::read(root.data().join("corpus/raw/000-corpus.txt")).unwrap(),
        body
    );
    assert_eq!(root.count("corpus", "documents"), 200);
    assert_eq!(*server.ranges.lock().unwrap(), vec![None]);
    // Nothing is left of the partial download.
    assert!(listing(&root.data().join("corpus/.partial")).is_empty());
}

#[test]
fn interrupted_download_resumes_with_range() {
    let body = corpus_text();
    let digest = sha(&body);
    let server = serve(body.clone(), false);
    let root = Root::new();
    root.config(&url_config(&server.url, &digest));
    // What an interrupted earlier run leaves: the first part of the file.
    let partial = root.data().join("corpus/.partial");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join(format!("{digest}.part")), &body[..1000]).unwrap();
    let err = root.ok("downloads", &[]);
    assert!(err.contains("resuming"), "{err}");
    assert_eq!(
        *server.ranges.lock().unwrap(),
        vec![Some("bytes=1000-".to_string())]
    );
    assert_eq!(
        std::fs::read(root.data().join("corpus/raw/000-corpus.txt")).unwrap(),
        body
    );
}

#[test]
fn a_dropped_connection_fails_the_step_and_the_rerun_resumes() {
    let body = corpus_text();
    let digest = sha(&body);
    let server = serve_with(Arc::new(Mutex::new(body.clone())), false, 1);
    let root = Root::new();
    root.config(&url_config(&server.url, &digest));
    let err = root.fails("downloads", &[]);
    assert!(
        err.contains("interrupted") && err.contains("rerun to resume"),
        "{err}"
    );
    assert!(!root.has_manifest("corpus"));
    let part = root.data().join(format!("corpus/.partial/{digest}.part"));
    let kept = std::fs::metadata(&part).unwrap().len();
    assert_eq!(
        kept,
        body.len() as u64 / 2,
        "what arrived is kept for the next run"
    );

    root.ok("downloads", &[]);
    assert_eq!(
        *server.ranges.lock().unwrap(),
        vec![None, Some(format!("bytes={kept}-"))]
    );
    assert_eq!(
        std::fs::read(root.data().join("corpus/raw/000-corpus.txt")).unwrap(),
        body
    );
}

#[test]
fn server_that_ignores_range_still_gives_the_right_file() {
    let body = corpus_text();
    let digest = sha(&body);
    let server = serve(body.clone(), true);
    let root = Root::new();
    root.config(&url_config(&server.url, &digest));
    let partial = root.data().join("corpus/.partial");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join(format!("{digest}.part")), &body[..1000]).unwrap();
    root.ok("downloads", &[]);
    assert_eq!(
        std::fs::read(root.data().join("corpus/raw/000-corpus.txt")).unwrap(),
        body
    );
}

#[test]
fn checksum_mismatch_fails_and_keeps_the_previous_good_corpus() {
    let good = corpus_text();
    let body = Arc::new(Mutex::new(good.clone()));
    let server = serve_shared(body.clone(), false);
    let root = Root::new();
    root.config(&url_config(&server.url, &sha(&good)));
    root.ok("downloads", &[]);
    let manifest_before = root.manifest("corpus");

    // The config now expects a new version of the file, but the server serves another.
    let expected = b"Someone:\nThe new version.\n".to_vec();
    *body.lock().unwrap() = b"Someone:\nA tampered file.\n".to_vec();
    root.config(&url_config(&server.url, &sha(&expected)));
    let err = root.fails("downloads", &[]);
    assert!(
        err.contains("checksum mismatch") && err.contains(&server.url),
        "{err}"
    );
    assert!(err.contains("previous corpus is kept"), "{err}");
    assert_eq!(
        std::fs::read(root.data().join("corpus/raw/000-corpus.txt")).unwrap(),
        good
    );
    assert_eq!(root.manifest("corpus"), manifest_before);

    // Once the server has the expected file, the same config succeeds.
    *body.lock().unwrap() = expected.clone();
    root.ok("downloads", &[]);
    assert_eq!(
        std::fs::read(root.data().join("corpus/raw/000-corpus.txt")).unwrap(),
        expected
    );
}

#[test]
fn http_errors_name_the_url() {
    let server = serve(Vec::new(), false);
    let root = Root::new();
    let missing = server.url.replace("corpus.txt", "missing.txt");
    root.config(&url_config(&missing, &"0".repeat(64)));
    let err = root.fails("downloads", &[]);
    assert!(err.contains(&missing) && err.contains("404"), "{err}");
    assert!(!root.has_manifest("corpus"));
}

#[test]
fn local_files_and_directories_are_gathered_and_non_utf8_is_skipped() {
    let root = Root::new();
    let src = root.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("a.txt"), "A:\none\n\nB:\ntwo\n").unwrap();
    std::fs::write(src.join("sub/b.txt"), "C:\nthree\n").unwrap();
    std::fs::write(src.join("bad.bin"), b"ok text\n\n\xff\xfe not utf-8").unwrap();
    std::fs::write(src.join(".hidden"), "ignored").unwrap();
    let single = root.path().join("single.txt");
    std::fs::write(&single, "D:\nfour\n").unwrap();
    root.config(&format!(
        "data:\n  sources:\n    - path: {}\n    - path: single.txt\n",
        src.display()
    ));
    let err = root.ok("downloads", &[]);
    assert!(
        err.contains("bad.bin") && err.contains("not UTF-8"),
        "{err}"
    );
    assert_eq!(root.count("corpus", "documents"), 4);
    assert_eq!(root.count("corpus", "sources"), 2);
    assert_eq!(root.count("corpus", "skipped_non_utf8"), 1);
    let raw = root.data().join("corpus/raw");
    assert_eq!(listing(&raw.join("000-src")), ["a.txt", "sub"]);
    assert_eq!(
        std::fs::read_to_string(raw.join("001-single.txt")).unwrap(),
        "D:\nfour\n"
    );
    // The relative path was taken from the config file's directory.
    assert!(root.manifest("corpus")["outputs"].as_array().unwrap().len() == 3);
}

#[test]
fn missing_source_names_the_path_and_keeps_earlier_outputs() {
    let root = Root::new();
    root.ok("downloads", &[]);
    let before = root.manifest("corpus");
    let missing = root.path().join("nope");
    root.config(&path_config(&missing, ""));
    let err = root.fails("downloads", &[]);
    assert!(
        err.contains("data.sources[0]") && err.contains(&missing.display().to_string()),
        "{err}"
    );
    assert_eq!(root.manifest("corpus"), before);
}

#[test]
fn empty_corpus_is_an_error() {
    let root = Root::new();
    let src = root.path().join("empty");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("blank.txt"), "\n\n\n").unwrap();
    root.config(&path_config(&src, ""));
    let err = root.fails("downloads", &[]);
    assert!(err.contains("corpus is empty"), "{err}");
    assert!(!root.has_manifest("corpus"));
}

#[test]
fn unreadable_entry_in_a_source_directory_names_it() {
    let root = Root::new();
    let src = root.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), "A:\none\n").unwrap();
    // A dangling symlink cannot be read, even by root (which ignores permission bits).
    std::os::unix::fs::symlink(root.path().join("gone"), src.join("link.txt")).unwrap();
    root.config(&path_config(&src, ""));
    let err = root.fails("downloads", &[]);
    assert!(err.contains("link.txt"), "{err}");
}

#[test]
fn later_steps_say_which_step_to_run_first() {
    let root = Root::new();
    let err = root.fails("dedup", &[]);
    assert!(
        err.contains("run `lavender-worker downloads` first"),
        "{err}"
    );
    let err = root.fails("precompute", &[]);
    assert!(
        err.contains("run `lavender-worker build_shards` first"),
        "{err}"
    );
}

/// The documents the Python writers below put in their files: several lines and a blank
/// line each, so a record read as text split at blank lines would show.
fn record_docs(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                "{prefix} document {i}: ünïcødé ✓\nline one of {prefix} {i}\n\nsecond paragraph {i}"
            )
        })
        .collect()
}

/// Python that defines `docs(prefix, n)` as [`record_docs`] does, with the output
/// directory as `d`.
const PY_DOCS: &str = r#"
import sys, os, json
import pyarrow as pa, pyarrow.parquet as pq, pandas as pd
d = sys.argv[1]
def docs(prefix, n):
    return [f"{prefix} document {i}: ünïcødé ✓\nline one of {prefix} {i}\n\nsecond paragraph {i}" for i in range(n)]
"#;

/// Runs `script` (after [`PY_DOCS`]) with the project's .venv Python, `dir` as argv[1].
fn python_writes(dir: &std::path::Path, script: &str) {
    lavender_testkit::python::require_modules(&["pyarrow", "pandas", "datasets"]);
    std::fs::create_dir_all(dir).unwrap();
    let out = std::process::Command::new(lavender_testkit::python::venv_tool("python"))
        .arg("-c")
        .arg(format!("{PY_DOCS}\n{script}"))
        .arg(dir)
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HOME", dir.join(".hf"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python writer failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn records_written_by_pandas_pyarrow_and_datasets_are_one_document_each() {
    let root = Root::new();
    let d = root.path().join("in");
    python_writes(
        &d,
        r##"
from datasets import Dataset, DatasetDict
# JSONL, gzip, by pandas: the text in "body", beside an id.
pd.DataFrame({"id": range(30), "body": docs("gz", 30)}).to_json(
    f"{d}/pandas.jsonl.gz", orient="records", lines=True, compression="gzip", force_ascii=False)
# JSONL, zstd, through pyarrow's compressed stream: two files taken by a glob.
os.makedirs(f"{d}/dumps")
for k in range(2):
    with pa.CompressedOutputStream(f"{d}/dumps/part-{k}.jsonl.zst", "zstd") as out:
        for t in docs(f"zst{k}", 20):
            out.write((json.dumps({"text": t, "lang": "en"}) + "\n").encode())
# Parquet in three row groups (pyarrow's default codec, snappy).
pq.write_table(pa.table({"n": list(range(250)), "text": docs("pq", 250)}), f"{d}/multi.parquet", row_group_size=100)
# A hub dataset's local copy: Parquet shards (pandas; gzip and zstd pages) and a card.
os.makedirs(f"{d}/hub/data")
pd.DataFrame({"content": docs("hub0", 40)}).to_parquet(f"{d}/hub/data/train-00000-of-00002.parquet", compression="gzip")
pd.DataFrame({"content": docs("hub1", 40)}).to_parquet(f"{d}/hub/data/train-00001-of-00002.parquet", compression="zstd")
open(f"{d}/hub/README.md", "w").write("# a dataset card\n")
# save_to_disk: a Dataset in two Arrow files, and a DatasetDict.
Dataset.from_dict({"text": docs("ds", 60), "label": list(range(60))}).save_to_disk(f"{d}/saved", num_shards=2)
DatasetDict({"train": Dataset.from_dict({"text": docs("dtrain", 25)}),
             "test": Dataset.from_dict({"text": docs("dtest", 5)})}).save_to_disk(f"{d}/saved_dict")
"##,
    );
    root.config(
        "data:\n  sources:\n\
         \x20   - {path: in/pandas.jsonl.gz, format: jsonl, field: body}\n\
         \x20   - {path: \"in/dumps/*.jsonl.zst\", format: jsonl}\n\
         \x20   - {path: in/multi.parquet, format: parquet}\n\
         \x20   - {path: in/hub, format: parquet, column: content}\n\
         \x20   - {path: in/saved, format: datasets}\n\
         \x20   - {path: in/saved_dict, format: datasets}\n",
    );
    root.ok("downloads", &[]);
    let raw = root.data().join("corpus/raw");
    let expect = [
        ("000-pandas.jsonl", record_docs("gz", 30)),
        ("001-dumps/part-0.jsonl", record_docs("zst0", 20)),
        ("001-dumps/part-1.jsonl", record_docs("zst1", 20)),
        ("002-multi.parquet.jsonl", record_docs("pq", 250)),
        (
            "003-hub/data/train-00000-of-00002.parquet.jsonl",
            record_docs("hub0", 40),
        ),
        (
            "003-hub/data/train-00001-of-00002.parquet.jsonl",
            record_docs("hub1", 40),
        ),
        (
            "004-saved/data-00000-of-00002.arrow.jsonl",
            record_docs("ds", 30),
        ),
        (
            "004-saved/data-00001-of-00002.arrow.jsonl",
            record_docs("ds", 60).split_off(30),
        ),
        (
            "005-saved_dict/train/data-00000-of-00001.arrow.jsonl",
            record_docs("dtrain", 25),
        ),
    ];
    for (file, want) in &expect {
        assert_eq!(&docs(&raw.join(file)), want, "{file}");
    }
    let m = root.manifest("corpus");
    let listed: Vec<String> = expect.iter().map(|(f, _)| format!("raw/{f}")).collect();
    assert_eq!(m["document_files"], serde_json::json!(listed));
    assert_eq!(
        m["outputs"],
        serde_json::json!(listed),
        "the card is not a Parquet file"
    );
    let total: usize = expect.iter().map(|(_, d)| d.len()).sum();
    assert_eq!(root.count("corpus", "documents"), total as u64);
    assert_eq!(root.count("corpus", "skipped_records"), 0);

    // dedup takes each record whole, blank lines inside and all, beside a text source.
    std::fs::write(root.path().join("plain.txt"), "T:\none\n\nU:\ntwo\n").unwrap();
    let cfg = std::fs::read_to_string(root.path().join("config.yaml")).unwrap();
    root.config(&format!("{cfg}    - path: plain.txt\n"));
    root.ok("downloads", &[]);
    root.ok("dedup", &[]);
    let mut want: Vec<String> = expect.into_iter().flat_map(|(_, d)| d).collect();
    want.extend(["T:\none".to_string(), "U:\ntwo".to_string()]);
    assert_eq!(
        docs(&root.data().join("corpus/dedup/documents.jsonl")),
        want
    );
}

#[test]
fn bad_records_fail_naming_their_place_or_are_skipped_and_counted() {
    let root = Root::new();
    let d = root.path().join("in");
    python_writes(
        &d,
        r##"
pd.DataFrame({"id": range(8), "text": docs("j", 8)}).to_json(
    f"{d}/lines.jsonl", orient="records", lines=True, force_ascii=False)
texts = docs("p", 10)
texts[6] = None
pq.write_table(pa.table({"text": texts}), f"{d}/nulls.parquet", row_group_size=4)
"##,
    );
    // Damage two lines of the pandas file: line 3 cut short, line 5 not an object.
    let jsonl = d.join("lines.jsonl");
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let cut = lines[2].find("line one").unwrap();
    lines[2].truncate(cut);
    lines[4] = "[1, 2]".into();
    std::fs::write(&jsonl, lines.join("\n") + "\n").unwrap();

    let config = |policy: &str| {
        root.config(&format!(
            "data:\n  on_bad_record: {policy}\n  sources:\n    - {{path: in/lines.jsonl, format: jsonl}}\n"
        ))
    };
    config("fail");
    let err = root.fails("downloads", &[]);
    let shown = format!(
        "{}:3: not a JSON object: EOF while parsing",
        jsonl.display()
    );
    assert!(
        err.contains(&shown) && err.contains("set data.on_bad_record: skip"),
        "{err}"
    );
    assert!(!root.has_manifest("corpus"));
    assert!(
        !root.data().join("corpus/raw").exists(),
        "nothing half-written: {:?}",
        listing(&root.data().join("corpus"))
    );

    config("skip");
    let err = root.ok(
        "downloads",
        &["--run-dir", root.run_dir().to_str().unwrap()],
    );
    assert!(err.contains("skipped 2 bad record(s)"), "{err}");
    assert_eq!(root.count("corpus", "documents"), 6);
    assert_eq!(root.count("corpus", "skipped_records"), 2);
    let skipped = &root.manifest("corpus")["skipped_records"];
    assert_eq!(skipped[0]["at"], format!("{}:3", jsonl.display()));
    assert_eq!(skipped[1]["at"], format!("{}:5", jsonl.display()));
    assert_eq!(skipped[1]["reason"], "an array; expected a JSON object");
    let loaded = root
        .events()
        .into_iter()
        .find(|e| e["kind"] == "data_loaded")
        .expect("a data_loaded event");
    assert_eq!(loaded["skipped_records"], 2);
    // The status counts them too (read from the files, as `lavenderd status` does
    // with the daemon down), in the shape the status contract allows.
    let status = root.status();
    assert_eq!(status["data"]["skipped_records"], 2, "{status}");

    // A Parquet null: its row group and row.
    root.config("data:\n  sources:\n    - {path: in/nulls.parquet, format: parquet}\n");
    let err = root.fails("downloads", &[]);
    assert!(
        err.contains(&format!(
            "{}, row group 1, row 2: column \"text\" is null; expected a string",
            d.join("nulls.parquet").display()
        )),
        "{err}"
    );
}

#[test]
fn record_sources_that_cannot_be_read_name_the_file_and_what_to_do() {
    let root = Root::new();
    let d = root.path().join("in");
    python_writes(
        &d,
        r##"
from datasets import Dataset, DatasetDict
pd.DataFrame({"id": range(40), "body": docs("b", 40)}).to_json(
    f"{d}/body.jsonl.gz", orient="records", lines=True, compression="gzip")
with pa.CompressedOutputStream(f"{d}/big.jsonl.zst", "zstd") as out:
    for t in docs("z", 2000):
        out.write((json.dumps({"text": t}) + "\n").encode())
pq.write_table(pa.table({"id": [1, 2], "body": ["x", "y"], "count": [3, 4]}), f"{d}/cols.parquet")
Dataset.from_dict({"content": ["x", "y"], "label": [0, 1]}).save_to_disk(f"{d}/saved")
DatasetDict({"train": Dataset.from_dict({"text": ["x"]}),
             "validation": Dataset.from_dict({"text": ["y"]})}).save_to_disk(f"{d}/dict")
"##,
    );
    let fails = |source: &str| {
        root.config(&format!("data:\n  sources:\n    - {source}\n"));
        let err = root.fails("downloads", &[]);
        assert!(!root.has_manifest("corpus"), "{err}");
        assert!(!root.data().join("corpus/raw").exists(), "{err}");
        err
    };
    let shown = |name: &str| d.join(name).display().to_string();

    let err = fails("{path: in/body.jsonl.gz, format: jsonl}");
    assert!(
        err.contains(&format!(
            "{}:1: no field \"text\" (the object has id, body)",
            shown("body.jsonl.gz")
        )) && err.contains("set the source's `field:`"),
        "{err}"
    );
    let err = fails("{path: in/cols.parquet, format: parquet}");
    assert!(
        err.contains(&format!(
            "{} has no column \"text\" (its columns: id, body, count)",
            shown("cols.parquet")
        )),
        "{err}"
    );
    let err = fails("{path: in/cols.parquet, format: parquet, column: count}");
    assert!(
        err.contains("column \"count\" holds INT64 values; expected a string column"),
        "{err}"
    );
    let err = fails("{path: in/saved, format: datasets}");
    assert!(
        err.contains("has no column \"text\" (its columns: content, label)"),
        "{err}"
    );
    let err = fails("{path: in/dict, format: datasets, split: test}");
    assert!(
        err.contains("has no split \"test\" (its splits: train, validation)"),
        "{err}"
    );
    let err = fails("{path: in/cols.parquet, format: datasets}");
    assert!(err.contains("is not a directory"), "{err}");
    let err = fails("{path: in, format: datasets}");
    assert!(
        err.contains("state.json (a Dataset's) and dataset_dict.json"),
        "{err}"
    );
    let err = fails("{path: in/body.jsonl.gz, format: parquet}");
    assert!(err.contains("is not a readable Parquet file"), "{err}");
    let err = fails("{path: in/nothing-*.jsonl, format: jsonl}");
    assert!(err.contains("no file matches"), "{err}");
    let err = fails("{path: in/cols.parquet, format: csv}");
    assert!(
        err.contains("data.sources[0].format") && err.contains("unknown value `csv`"),
        "{err}"
    );

    // Truncated compressed files: the step fails naming the file, never a shorter corpus.
    for (name, field) in [("body.jsonl.gz", "body"), ("big.jsonl.zst", "text")] {
        let bytes = std::fs::read(d.join(name)).unwrap();
        let cut = d.join(format!("cut-{name}"));
        std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
        let err = fails(&format!(
            "{{path: {}, format: jsonl, field: {field}}}",
            cut.display()
        ));
        assert!(
            err.contains(&cut.display().to_string()) && err.contains("truncated or damaged"),
            "{name}: {err}"
        );
        assert_eq!(
            err.trim()
                .lines()
                .filter(|l| l.contains("truncated"))
                .count(),
            1,
            "{err}"
        );
    }
}
