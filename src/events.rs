//! `<run>/events.jsonl`: append-only milestones of a run, one JSON object a line
//! (`{ts, kind, message, ...fields}`). The worker appends; the daemon tails it by
//! byte offset to send notifications.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{IoContext, Result};

/// File name of the event log inside a run directory.
pub const FILE: &str = "events.jsonl";

/// The event kinds the worker emits. Readers must accept kinds not listed here.
pub mod kind {
    pub const RUN_STARTED: &str = "run_started";
    pub const DATA_LOADED: &str = "data_loaded";
    pub const TOKENIZER_READY: &str = "tokenizer_ready";
    pub const DATASET_BUILT: &str = "dataset_built";
    /// The corpus fills fewer shards than the scale's preset asks for; the message is
    /// the one line that says so (`ShardShortfall`).
    pub const SHARDS_SHORT: &str = "shards_short";
    pub const STAGE_STARTED: &str = "stage_started";
    pub const CHECKPOINT_SAVED: &str = "checkpoint_saved";
    pub const CHECKPOINT_LOADED: &str = "checkpoint_loaded";
    /// Written by the daemon: a checkpoint that failed its check before a resume, or
    /// that the worker could not load, was moved to `<run>/damaged/<name>/`;
    /// `checkpoint`, `moved_to` and `reason` say which and what was wrong.
    pub const CHECKPOINT_DAMAGED: &str = "checkpoint_damaged";
    /// A start or resume skips data recorded in `<run>/skipped.json` after a
    /// rollback (`lavender::skips`); `steps` says how many steps' worth.
    pub const DATA_SKIPPED: &str = "data_skipped";
    pub const STAGE_FINISHED: &str = "stage_finished";
    pub const FINAL_SAVED: &str = "final_saved";
    pub const RETENTION: &str = "retention";
    pub const ERROR: &str = "error";
    /// The worker is ending without finishing; `failure: {kind, message, …}`
    /// (`lavender::failure::Failure`) says why.
    pub const FAILED: &str = "failed";

    /// Every kind above, in the order a run emits them.
    pub const ALL: &[&str] = &[
        RUN_STARTED,
        DATA_LOADED,
        TOKENIZER_READY,
        DATASET_BUILT,
        SHARDS_SHORT,
        STAGE_STARTED,
        CHECKPOINT_SAVED,
        CHECKPOINT_LOADED,
        CHECKPOINT_DAMAGED,
        DATA_SKIPPED,
        STAGE_FINISHED,
        FINAL_SAVED,
        RETENTION,
        ERROR,
        FAILED,
    ];
}

/// The `run_started` field by which a worker declares who enforces checkpoint
/// retention in its run: [`RETENTION_BY_WORKER`] (it prunes its own checkpoints, as
/// `lavender-worker` does) or `"daemon"`. Absent means the daemon does it.
pub const RETENTION_FIELD: &str = "retention";
/// The value of [`RETENTION_FIELD`] for a worker that prunes its own checkpoints.
pub const RETENTION_BY_WORKER: &str = "worker";

/// True when `event` is a `run_started` that declares the worker prunes its own
/// checkpoints.
pub fn declares_own_retention(event: &Event) -> bool {
    event.kind == kind::RUN_STARTED
        && event.field(RETENTION_FIELD).and_then(Value::as_str) == Some(RETENTION_BY_WORKER)
}

/// Keys owned by the struct itself; `with` will not shadow them with extra fields.
const RESERVED: [&str; 3] = ["ts", "kind", "message"];

/// One line of `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// RFC 3339 UTC time, e.g. `2026-04-24T16:08:45Z`.
    pub ts: String,
    pub kind: String,
    pub message: String,
    /// Extra fields (epoch/epochs, ce_loss, remaining_hours, path, counts, …).
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Event {
    /// An event stamped with the current time.
    pub fn new(kind: &str, message: impl Into<String>) -> Event {
        Event {
            ts: crate::time::rfc3339_z(crate::time::now_utc()),
            kind: kind.to_string(),
            message: message.into(),
            fields: Map::new(),
        }
    }

    /// Add an extra field. A value that cannot be represented as JSON becomes
    /// `null`; the reserved keys `ts`, `kind` and `message` are left untouched.
    pub fn with(mut self, key: &str, value: impl Serialize) -> Event {
        if !RESERVED.contains(&key) {
            let value = serde_json::to_value(value).unwrap_or(Value::Null);
            self.fields.insert(key.to_string(), value);
        }
        self
    }

    /// An extra field, if present.
    pub fn field(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }
}

/// `<run_dir>/events.jsonl`.
pub fn path(run_dir: &Path) -> PathBuf {
    run_dir.join(FILE)
}

/// Append one event as a single line. The whole line goes to the kernel in one
/// `write` on an `O_APPEND` descriptor, so concurrent appenders never interleave.
pub fn append(run_dir: &Path, event: &Event) -> Result<()> {
    let path = path(run_dir);
    // Serializing a struct of strings and JSON values cannot fail.
    let mut line = serde_json::to_vec(event).unwrap_or_default();
    line.push(b'\n');
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .ctx("open event log", &path)?;
    file.write_all(&line).ctx("append to event log", &path)
}

/// What `read_from` found after an offset.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventBatch {
    /// Events of the complete lines read, in file order.
    pub events: Vec<Event>,
    /// Where the next call should start: just past the last complete line read.
    pub next_offset: u64,
    /// Complete lines that were not a valid event (and were skipped).
    pub skipped: usize,
}

/// Read the complete lines after byte `offset`. A partial last line (a writer in
/// the middle of appending) is left for the next call. A file shorter than
/// `offset` was replaced, so it is read from the start. A missing file is an
/// `Error::Io` (check `is_not_found()`).
pub fn read_from(path: &Path, offset: u64) -> Result<EventBatch> {
    let mut file = std::fs::File::open(path).ctx("open event log", path)?;
    let len = file.metadata().ctx("stat event log", path)?.len();
    let start = if offset > len { 0 } else { offset };
    file.seek(SeekFrom::Start(start))
        .ctx("seek in event log", path)?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf).ctx("read event log", path)?;

    let mut batch = EventBatch {
        next_offset: start,
        ..EventBatch::default()
    };
    let Some(last_newline) = buf.iter().rposition(|&b| b == b'\n') else {
        return Ok(batch);
    };
    for line in buf[..last_newline].split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Event>(line) {
            Ok(event) => batch.events.push(event),
            Err(_) => batch.skipped += 1,
        }
    }
    batch.next_offset = start + last_newline as u64 + 1;
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn append_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let a = Event::new(kind::RUN_STARTED, "run started")
            .with("path", "/data/checkpoints/run-1")
            .with("seed", 7);
        let b = Event::new(kind::STAGE_FINISHED, "pretrain finished\nwith a newline")
            .with("epoch", 2)
            .with("epochs", 3)
            .with("ce_loss", 1.5)
            .with("kind", "ignored");
        append(dir.path(), &a).unwrap();
        append(dir.path(), &b).unwrap();

        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");

        let batch = read_from(&path(dir.path()), 0).unwrap();
        assert_eq!(batch.events, vec![a, b.clone()]);
        assert_eq!(batch.skipped, 0);
        assert_eq!(batch.next_offset, text.len() as u64);
        assert_eq!(b.kind, kind::STAGE_FINISHED);
        assert_eq!(b.field("epoch"), Some(&json!(2)));
        assert!(b.ts.ends_with('Z'), "{}", b.ts);
    }

    #[test]
    fn partial_last_line_is_left_for_next_call() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path());
        append(dir.path(), &Event::new(kind::DATA_LOADED, "loaded")).unwrap();
        let complete = std::fs::metadata(&p).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(br#"{"ts":"2026-01-01T00:00:00Z","kind":"err"#)
            .unwrap();

        let batch = read_from(&p, 0).unwrap();
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.skipped, 0);
        assert_eq!(batch.next_offset, complete);

        f.write_all(b"or\",\"message\":\"boom\"}\n").unwrap();
        let batch = read_from(&p, batch.next_offset).unwrap();
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.events[0].kind, kind::ERROR);
        assert_eq!(batch.events[0].message, "boom");
        assert_eq!(batch.next_offset, std::fs::metadata(&p).unwrap().len());
    }

    #[test]
    fn garbage_lines_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path());
        append(dir.path(), &Event::new(kind::RUN_STARTED, "a")).unwrap();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"not json\n\n{\"kind\": 3}\n\xff\xfe\n")
            .unwrap();
        append(dir.path(), &Event::new(kind::FINAL_SAVED, "b")).unwrap();

        let batch = read_from(&p, 0).unwrap();
        let kinds: Vec<_> = batch.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, [kind::RUN_STARTED, kind::FINAL_SAVED]);
        assert_eq!(batch.skipped, 3);
    }

    #[test]
    fn resumes_from_offset_and_restarts_when_file_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path());
        append(dir.path(), &Event::new(kind::RUN_STARTED, "1")).unwrap();
        append(dir.path(), &Event::new(kind::STAGE_STARTED, "2")).unwrap();
        let first = read_from(&p, 0).unwrap();
        assert_eq!(first.events.len(), 2);

        let again = read_from(&p, first.next_offset).unwrap();
        assert!(again.events.is_empty());
        assert_eq!(again.next_offset, first.next_offset);

        append(dir.path(), &Event::new(kind::CHECKPOINT_SAVED, "3")).unwrap();
        let next = read_from(&p, first.next_offset).unwrap();
        assert_eq!(next.events.len(), 1);
        assert_eq!(next.events[0].message, "3");

        std::fs::remove_file(&p).unwrap();
        append(dir.path(), &Event::new(kind::RUN_STARTED, "new")).unwrap();
        let replaced = read_from(&p, next.next_offset).unwrap();
        assert_eq!(replaced.events.len(), 1);
        assert_eq!(replaced.events[0].message, "new");
    }

    #[test]
    fn concurrent_appenders_do_not_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().to_path_buf();
        let long = "x".repeat(2000);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let run = run.clone();
                let long = long.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let e = Event::new(kind::RETENTION, long.clone())
                            .with("thread", t)
                            .with("i", i);
                        append(&run, &e).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let batch = read_from(&path(&run), 0).unwrap();
        assert_eq!(batch.events.len(), 200);
        assert_eq!(batch.skipped, 0);
    }

    #[test]
    fn a_worker_declares_its_own_retention_in_run_started() {
        let started = Event::new(kind::RUN_STARTED, "x");
        assert!(!declares_own_retention(&started));
        assert!(declares_own_retention(
            &started.clone().with(RETENTION_FIELD, RETENTION_BY_WORKER)
        ));
        assert!(!declares_own_retention(
            &started.with(RETENTION_FIELD, "daemon")
        ));
        let saved = Event::new(kind::CHECKPOINT_SAVED, "x").with(RETENTION_FIELD, "worker");
        assert!(!declares_own_retention(&saved));
    }

    #[test]
    fn missing_file_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_from(&path(dir.path()), 0).unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
    }
}
