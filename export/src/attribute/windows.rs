//! The run's training data as the run saw it: its chunk's pretraining shards (the
//! training split; not the held-out validation text, not other chunks' shards),
//! cut into windows of `training.seq_len + 1` tokens exactly as the trainer cuts
//! them ([`lavender::tokens::pretrain_window_starts`]), each window mapped back to
//! the documents whose tokens it holds.
//!
//! A pretraining shard's token array is its documents' tokens, each followed by the
//! end-of-text token, in the order of the shard's JSONL file; windows run across
//! document ends, so a window may hold the end of one document and the start of
//! the next.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use lavender::checkpoint::EXPORT_MARKER;
use lavender::tokens::{self, TokenBytes, TokenIndex};
use serde_json::Value;

/// One document of a shard's JSONL file.
#[derive(Debug)]
pub(crate) struct Document {
    pub file: PathBuf,
    /// 1-based line of `file`.
    pub line: usize,
    pub text: String,
    /// Its tokens, the end-of-text token included.
    pub tokens: usize,
}

/// The part of a document a window holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Overlap {
    pub doc: usize,
    /// Token offsets within the document, `from..to`.
    pub from: usize,
    pub to: usize,
    /// The same span in bytes of the document's text (UTF-8).
    pub byte_from: usize,
    pub byte_to: usize,
}

#[derive(Debug)]
pub(crate) struct Window {
    /// 0-based, in the trainer's numbering (shard by shard, from the start), kept
    /// when the windows are [sampled](TrainingWindows::sample).
    pub index: usize,
    pub shard: String,
    /// Token offset of its first token in the shard's array.
    pub start: usize,
    pub ids: Vec<u32>,
    /// The window's tokens as text.
    pub text: String,
    pub overlaps: Vec<Overlap>,
}

#[derive(Debug)]
pub(crate) struct TrainingWindows {
    pub chunk: Option<u64>,
    pub shards: Vec<String>,
    /// Tokens of each window given to SOURCE (`seq_len + 1`, or the model's
    /// context when that is shorter).
    pub window_tokens: usize,
    pub windows: Vec<Window>,
    /// The run's windows before [`TrainingWindows::sample`]; `windows.len()` when all.
    pub total: usize,
    /// The sample's spacing: every `every`-th window (1: all of them).
    pub every: usize,
    pub documents: Vec<Document>,
}

impl TrainingWindows {
    /// Keeps an evenly spaced sample of at most `n` windows (`n` ≥ 1): every k-th
    /// in the trainer's numbering from the first, k = ⌈total / n⌉. Documents stay
    /// (those no kept window touches get no score).
    pub fn sample(&mut self, n: usize) {
        let k = self.total.div_ceil(n.max(1)).max(1);
        self.windows.retain(|w| w.index % k == 0);
        self.every = k;
    }
}

/// "5574 windows", or "929 windows (every 6th of 5574: --windows)" for a sample.
pub(crate) fn counted(count: usize, of: usize, every: usize) -> String {
    if every > 1 {
        format!("{count} windows (every {every}th of {of}: --windows)")
    } else {
        format!("{count} windows")
    }
}

/// The windows of the shards the run's checkpoint `export` trained on (its
/// `lavender_export.json` names them), in the order the trainer numbers them.
pub(crate) fn from_run(
    run: &Path,
    export: &Path,
    seq_len: u64,
    context: u64,
) -> Result<TrainingWindows> {
    let marker = export.join(EXPORT_MARKER);
    let text = fs::read(&marker).with_context(|| format!("could not read {}", marker.display()))?;
    let v: Value = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not JSON", marker.display()))?;
    let cursor = &v["lavender_trainer_state"]["data_cursor"];
    let Some(shards) = cursor["shards"].as_array().map(|a| {
        a.iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect::<Vec<_>>()
    }) else {
        bail!(
            "{} does not say which shards the run trained on (data_cursor.shards); pass --train FILE.jsonl with the documents to score",
            marker.display()
        );
    };
    let chunk = cursor["chunk"].as_u64();
    if seq_len == 0 {
        bail!(
            "{} has no training.seq_len; pass --train FILE.jsonl with the documents to score",
            run.join("config.yaml").display()
        );
    }
    let data_root = std::path::absolute(run)
        .unwrap_or_else(|_| run.to_path_buf())
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .with_context(|| format!("cannot tell the data root of {}", run.display()))?;
    let tokens_dir = data_root.join(lavender::data_root::TOKENS);
    let index = TokenIndex::read(&tokens_dir).map_err(|e| {
        anyhow::anyhow!("{e}; the run's training windows are cut from the data root's token arrays (`lavender-worker precompute`), or pass --train FILE.jsonl")
    })?;
    // Windows are only the run's if the arrays were made by the tokenizer it used.
    let run_tok = run.join(tokens::TOKENIZER_FILE);
    let data_tok = tokens_dir.join(tokens::TOKENIZER_FILE);
    if fs::read(&run_tok).ok() != fs::read(&data_tok).ok() {
        bail!(
            "{} differs from the run's {}: the token arrays were rebuilt since the run trained, so their windows are not the ones it saw; pass --train FILE.jsonl",
            data_tok.display(),
            run_tok.display()
        );
    }
    let bytes = TokenBytes::read(&run_tok)?;
    let seq_len = seq_len as usize;
    let window_tokens = (seq_len + 1).min(context as usize);
    let mut out = TrainingWindows {
        chunk,
        shards: shards.clone(),
        window_tokens,
        windows: Vec::new(),
        total: 0,
        every: 1,
        documents: Vec::new(),
    };
    for shard in &shards {
        let Some(entry) = index.pretrain.shards.iter().find(|s| &s.shard == shard) else {
            bail!(
                "the run trained on {shard}, which {} no longer lists; the data was rebuilt since: pass --train FILE.jsonl",
                tokens_dir.join(tokens::INDEX_FILE).display()
            );
        };
        let array = tokens::read_array(&tokens_dir.join(&entry.file), index.dtype)?;
        let jsonl = data_root
            .join(lavender::data_root::SHARDS)
            .join(format!("{shard}.jsonl"));
        add_shard(
            &mut out,
            shard,
            &array,
            index.eos_id,
            &jsonl,
            &bytes,
            seq_len,
        )?;
    }
    if out.windows.is_empty() {
        bail!(
            "the run's shards ({}) hold no whole window of {} tokens",
            shards.join(", "),
            seq_len + 1
        );
    }
    out.total = out.windows.len();
    Ok(out)
}

/// Adds the windows of one shard and its documents.
fn add_shard(
    out: &mut TrainingWindows,
    shard: &str,
    array: &[u32],
    eos: u32,
    jsonl: &Path,
    bytes: &TokenBytes,
    seq_len: usize,
) -> Result<()> {
    let text = fs::read_to_string(jsonl).with_context(|| {
        format!(
            "could not read {} (the documents of {shard}); pass --train FILE.jsonl",
            jsonl.display()
        )
    })?;
    let first_doc = out.documents.len();
    // Each document's token span in the array: up to and including its end token.
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for (i, &t) in array.iter().enumerate() {
        if t == eos {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() != spans.len() || start != array.len() {
        bail!(
            "{} holds {} documents but its token array {} document ends; the data was rebuilt since the tokens were: rerun `lavender-worker precompute --force`, or pass --train FILE.jsonl",
            jsonl.display(),
            lines.len(),
            spans.len()
        );
    }
    for (k, (line, &(a, b))) in lines.iter().zip(&spans).enumerate() {
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{} is not JSON", jsonl.display(), k + 1))?;
        out.documents.push(Document {
            file: jsonl.to_path_buf(),
            line: k + 1,
            text: v["text"].as_str().unwrap_or_default().to_string(),
            tokens: b - a,
        });
    }
    // Byte offset of every token in the shard's text.
    let mut at = Vec::with_capacity(array.len() + 1);
    let mut sum = 0usize;
    at.push(0);
    for &t in array {
        sum += bytes.of(t).len();
        at.push(sum);
    }
    for start in tokens::pretrain_window_starts(array.len(), seq_len) {
        let end = start + out.window_tokens;
        let ids = array[start..end].to_vec();
        let text = String::from_utf8_lossy(
            &ids.iter()
                .flat_map(|&t| bytes.of(t).to_vec())
                .collect::<Vec<u8>>(),
        )
        .into_owned();
        // The documents the window overlaps: spans are sorted, so from the first
        // whose end is past the window's start.
        let first = spans.partition_point(|&(_, b)| b <= start);
        let overlaps = spans[first..]
            .iter()
            .enumerate()
            .take_while(|(_, (a, _))| *a < end)
            .map(|(j, &(a, b))| {
                let (from, to) = (start.max(a), end.min(b));
                Overlap {
                    doc: first_doc + first + j,
                    from: from - a,
                    to: to - a,
                    byte_from: at[from] - at[a],
                    byte_to: at[to] - at[a],
                }
            })
            .collect();
        out.windows.push(Window {
            index: out.windows.len(),
            shard: shard.to_string(),
            start,
            ids,
            text,
            overlaps,
        });
    }
    Ok(())
}

/// Char offsets within `text` of a byte span (a byte inside a character counts
/// from that character).
pub(crate) fn char_span(text: &str, byte_from: usize, byte_to: usize) -> (usize, usize) {
    let chars = |b: usize| {
        text.char_indices()
            .take_while(|(i, _)| *i < b.min(text.len()))
            .count()
    };
    (chars(byte_from), chars(byte_to))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes() -> (tempfile::TempDir, TokenBytes) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokenizer.json");
        fs::write(
            &p,
            r#"{"added_tokens": [{"id": 0, "content": "<e>"}],
                "model": {"vocab": {"a": 1, "b": 2, "c": 3, "Ã©": 4}}}"#,
        )
        .unwrap();
        let t = TokenBytes::read(&p).unwrap();
        (dir, t)
    }

    #[test]
    fn windows_are_the_trainers_and_know_their_documents() {
        let (dir, t) = bytes();
        let jsonl = dir.path().join("shard-00000.jsonl");
        fs::write(
            &jsonl,
            "{\"text\": \"abc\"}\n{\"text\": \"é\"}\n{\"text\": \"bbbbb\"}\n",
        )
        .unwrap();
        // abc<e> é<e> bbbbb<e>: 11 tokens; seq_len 3: windows of 4 at 0, 3, 6.
        let array = [1, 2, 3, 0, 4, 0, 2, 2, 2, 2, 2, 0];
        let mut w = TrainingWindows {
            chunk: Some(1),
            shards: vec!["shard-00000".into()],
            window_tokens: 4,
            windows: Vec::new(),
            total: 0,
            every: 1,
            documents: Vec::new(),
        };
        add_shard(&mut w, "shard-00000", &array, 0, &jsonl, &t, 3).unwrap();
        let starts: Vec<usize> = w.windows.iter().map(|w| w.start).collect();
        assert_eq!(starts, [0, 3, 6]);
        assert_eq!(w.documents.len(), 3);
        assert_eq!(w.documents[2].tokens, 6);
        assert_eq!(w.windows[0].text, "abc<e>");
        // Window 1 (tokens 3..7) holds doc 0's end, all of doc 1, doc 2's start.
        let o: Vec<(usize, usize, usize, usize, usize)> = w.windows[1]
            .overlaps
            .iter()
            .map(|o| (o.doc, o.from, o.to, o.byte_from, o.byte_to))
            .collect();
        assert_eq!(o, [(0, 3, 4, 3, 6), (1, 0, 2, 0, 5), (2, 0, 1, 0, 1)]);
        assert_eq!(w.windows[1].text, "<e>é<e>b");
        assert_eq!(char_span(&w.documents[1].text, 0, 2), (0, 1));
        assert_eq!(
            w.windows.iter().map(|w| w.index).collect::<Vec<_>>(),
            [0, 1, 2]
        );

        // A JSONL that does not match the array is refused, naming both.
        fs::write(&jsonl, "{\"text\": \"abc\"}\n").unwrap();
        let err = add_shard(&mut w, "shard-00000", &array, 0, &jsonl, &t, 3)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("holds 1 documents but its token array 3 document ends"),
            "{err}"
        );
    }

    fn numbered(total: usize) -> TrainingWindows {
        TrainingWindows {
            chunk: None,
            shards: Vec::new(),
            window_tokens: 2,
            windows: (0..total)
                .map(|index| Window {
                    index,
                    shard: "s".into(),
                    start: 2 * index,
                    ids: vec![1, 2],
                    text: String::new(),
                    overlaps: Vec::new(),
                })
                .collect(),
            total,
            every: 1,
            documents: Vec::new(),
        }
    }

    #[test]
    fn a_sample_is_every_kth_window_in_the_trainers_numbering() {
        let kept = |total: usize, n: usize| {
            let mut w = numbered(total);
            w.sample(n);
            (
                w.every,
                w.windows.iter().map(|w| w.index).collect::<Vec<_>>(),
            )
        };
        assert_eq!(kept(10, 3), (4, vec![0, 4, 8]));
        assert_eq!(kept(10, 5), (2, vec![0, 2, 4, 6, 8]));
        assert_eq!(kept(10, 10), (1, (0..10).collect()));
        assert_eq!(kept(10, 1000), (1, (0..10).collect()));
        assert_eq!(kept(10, 1), (10, vec![0]));
        // At most n, never more: 5,574 windows, 1,000 asked, every 6th: 929.
        let (every, idx) = kept(5_574, 1_000);
        assert_eq!((every, idx.len()), (6, 929));
    }
}
