//! `downloads`: local files and directories, URL sources against a real HTTP server on
//! loopback (with Range resume and checksum verification), and bad input.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use lavender_testkit::data_steps::{Root, listing, path_config};
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
