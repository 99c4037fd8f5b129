//! Where SFT samples and DPO pairs come from: the user's JSONL files when configured,
//! otherwise the corpus itself — a document (a speech) as prompt and the next one as
//! response; for DPO the next one is `chosen` and a speech drawn from elsewhere (far
//! enough back to belong to another scene, most likely another play) is `rejected`.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use super::BATCH;
use crate::data::documents::{read_docs_while, unit_hash};

/// Derived sets stop at this many samples (pairs) each: plenty for the sft and dpo stages
/// at every scale, and it keeps precompute's output proportional to the corpus' size.
pub const DERIVED_MAX: u64 = 250_000;
/// Candidates for a derived pair's `rejected`: this many documents, read at least
/// [`REJECT_GAP`] documents before the pair's `chosen`.
const REJECT_POOL: usize = 1024;
/// How far back a `rejected` is drawn from (or half the documents read so far, if fewer,
/// so a small corpus still yields pairs). A speech from the same scene is often as fitting
/// an answer as the true one; from another scene the preference is clear-cut: an answer
/// that follows the prompt's own story and people.
const REJECT_GAP: usize = 1024;

#[derive(Deserialize)]
struct Message {
    role: String,
    content: String,
}

#[derive(Deserialize)]
struct Conversation {
    messages: Vec<Message>,
}

#[derive(Deserialize)]
struct Preference {
    prompt: String,
    chosen: String,
    rejected: String,
}

/// A conversation as prompt and response: every message before the last as
/// `role:\ncontent` paragraphs, then the last (the assistant's) role header; the response
/// is the last message's content.
pub fn render_conversation(messages: &[(String, String)]) -> Option<(String, String)> {
    let ((last_role, last), earlier) = messages.split_last()?;
    let mut prompt = String::new();
    for (role, content) in earlier {
        prompt.push_str(&format!("{role}:\n{content}\n\n"));
    }
    prompt.push_str(&format!("{last_role}:\n"));
    Some((prompt, last.clone()))
}

fn for_each_line<T: for<'de> Deserialize<'de>>(
    path: &Path,
    what: &str,
    mut on: impl FnMut(T, u64) -> Result<()>,
) -> Result<()> {
    let f = File::open(path)
        .with_context(|| format!("could not open {what} file {}", path.display()))?;
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("could not read {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let item: T = serde_json::from_str(&line)
            .with_context(|| format!("{}:{} is not a valid {what} line", path.display(), i + 1))?;
        on(item, i as u64 + 1)?;
    }
    Ok(())
}

/// SFT samples `[prompt, response]` from `{"messages":[{"role","content"}…]}` lines.
pub fn sft_from_jsonl(path: &Path, mut on: impl FnMut(Vec<String>) -> Result<()>) -> Result<()> {
    for_each_line(path, "SFT (messages)", |c: Conversation, line| {
        let messages: Vec<(String, String)> = c
            .messages
            .into_iter()
            .map(|m| (m.role, m.content))
            .collect();
        match messages.last() {
            Some((role, _)) if role == "assistant" => {}
            _ => bail!(
                "{}:{line}: the last message must be the assistant's (the response to learn)",
                path.display()
            ),
        }
        let (prompt, response) = render_conversation(&messages).expect("non-empty");
        on(vec![prompt, response])
    })
}

/// DPO pairs `[prompt, chosen, rejected]` from `{"prompt","chosen","rejected"}` lines.
pub fn dpo_from_jsonl(path: &Path, mut on: impl FnMut(Vec<String>) -> Result<()>) -> Result<()> {
    for_each_line(path, "DPO (prompt/chosen/rejected)", |p: Preference, _| {
        on(vec![p.prompt, p.chosen, p.rejected])
    })
}

/// A record for a [`super::RecordSink`]: the text its held-out split is decided by, and
/// the token ids of its parts (prompt first).
pub struct Encoded {
    pub key: String,
    pub parts: Vec<Vec<u32>>,
}

pub type Sink<'a> = &'a mut dyn FnMut(Encoded) -> Result<()>;
/// Token ids of a batch of texts.
pub type Encode<'a> = &'a dyn Fn(Vec<&str>) -> Result<Vec<Vec<u32>>>;

/// A document that `derive` has read: its text and ids, and the split of the pair it was
/// the response of (`None` for the first document, which answers nothing).
struct Seen {
    index: u64,
    text: String,
    ids: Vec<u32>,
    heldout: Option<bool>,
}

/// Derive SFT samples and/or DPO pairs from consecutive documents of a document file.
/// Each document is tokenized once (in parallel batches, by `encode`) and its ids reused
/// as prompt, response, chosen or rejected; a prompt is the document then `sep_ids`.
///
/// `heldout(key)` is the split a record with that prompt text goes to. A pair's
/// `rejected` is drawn from [`REJECT_POOL`] documents, [`REJECT_GAP`] back, that were
/// responses in the pair's own split, so no held-out response is ever trained on, as chosen or as
/// rejected: otherwise a held-out pair's `rejected` (most likely a training `chosen`) is
/// pushed up by training while its `chosen` never is, and held-out reward accuracy
/// measures memorised texts instead of preferences.
#[allow(clippy::too_many_arguments)]
pub fn derive(
    docs: &Path,
    seed: u64,
    max: u64,
    sep_ids: &[u32],
    encode: Encode,
    heldout: &dyn Fn(&str) -> bool,
    mut sft: Option<Sink>,
    mut dpo: Option<Sink>,
) -> Result<()> {
    // Candidates for `rejected`, oldest first (indices increase), by split.
    let mut pools: [VecDeque<Seen>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut prev: Option<Seen> = None;
    let (mut n_sft, mut n_dpo, mut i) = (0u64, 0u64, 0u64);
    let salt = format!("lavender/rejected/{seed}/");
    let mut batch: Vec<String> = Vec::with_capacity(BATCH);
    // Returns whether any set still wants samples.
    let mut process = |batch: &mut Vec<String>| -> Result<bool> {
        let ids = encode(batch.iter().map(String::as_str).collect())?;
        for (text, ids) in batch.drain(..).zip(ids) {
            let mut split = None;
            if let Some(p) = prev.take() {
                let held = heldout(&p.text);
                split = Some(held);
                let prompt: Vec<u32> = p.ids.iter().chain(sep_ids).copied().collect();
                if let Some(on) = sft.as_mut().filter(|_| n_sft < max) {
                    on(Encoded {
                        key: p.text.clone(),
                        parts: vec![prompt.clone(), ids.clone()],
                    })?;
                    n_sft += 1;
                }
                // Held-out and training pairs draw their `rejected` from equally far.
                let gap = (REJECT_GAP as u64).min(i / 2);
                let window = (REJECT_GAP + REJECT_POOL) as u64;
                for pool in &mut pools {
                    while pool.front().is_some_and(|s| s.index + window < i) {
                        pool.pop_front();
                    }
                }
                let pool = &pools[usize::from(held)];
                let n = pool.partition_point(|s| s.index + gap < i);
                if let Some(on) = dpo.as_mut().filter(|_| n_dpo < max && n > 0) {
                    let pick = (unit_hash(&i.to_le_bytes(), &salt) * n as f64) as usize;
                    let rejected = &pool[pick.min(n - 1)];
                    // Never a copy of `chosen`.
                    if rejected.text != text {
                        on(Encoded {
                            key: p.text.clone(),
                            parts: vec![prompt, ids.clone(), rejected.ids.clone()],
                        })?;
                        n_dpo += 1;
                    }
                }
                // The prompt joins the candidates only now, so it never rejects itself.
                match p.heldout {
                    Some(h) => pools[usize::from(h)].push_back(p),
                    None => {
                        pools[0].push_back(Seen {
                            index: p.index,
                            text: p.text.clone(),
                            ids: p.ids.clone(),
                            heldout: None,
                        });
                        pools[1].push_back(p);
                    }
                }
            }
            prev = Some(Seen {
                index: i,
                text,
                ids,
                heldout: split,
            });
            i += 1;
        }
        Ok(sft.is_some() && n_sft < max || dpo.is_some() && n_dpo < max)
    };
    read_docs_while(docs, |text, _| {
        batch.push(text.to_string());
        if batch.len() >= BATCH {
            // Once both sets are full the rest of the corpus is not tokenized for nothing.
            return process(&mut batch);
        }
        Ok(true)
    })?;
    process(&mut batch).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::documents::DocWriter;

    #[test]
    fn conversation_renders_history_and_role_header() {
        let m = vec![
            ("system".to_string(), "Be brief.".to_string()),
            ("user".to_string(), "Hi?".to_string()),
            ("assistant".to_string(), "Hello.".to_string()),
        ];
        let (p, r) = render_conversation(&m).unwrap();
        assert_eq!(p, "system:\nBe brief.\n\nuser:\nHi?\n\nassistant:\n");
        assert_eq!(r, "Hello.");
    }

    #[test]
    fn derived_pairs_follow_the_corpus_and_reject_from_far_back() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("d.jsonl");
        let mut w = DocWriter::create(&p).unwrap();
        let n = REJECT_GAP + 8;
        for i in 0..n {
            w.write(&format!("S:\nspeech {i}")).unwrap();
        }
        w.finish().unwrap();
        // A stand-in tokenizer: one id per document, its position.
        let encode = |batch: Vec<&str>| -> Result<Vec<Vec<u32>>> {
            Ok(batch
                .iter()
                .map(|t| vec![t.rsplit(' ').next().unwrap().parse::<u32>().unwrap()])
                .collect())
        };
        let (mut sft, mut dpo) = (Vec::new(), Vec::new());
        derive(
            &p,
            1,
            DERIVED_MAX,
            &[99],
            &encode,
            &|_| false,
            Some(&mut |s| {
                sft.push(s);
                Ok(())
            }),
            Some(&mut |d| {
                dpo.push(d);
                Ok(())
            }),
        )
        .unwrap();
        assert_eq!(sft.len(), n - 1);
        assert_eq!(sft[0].key, "S:\nspeech 0");
        assert_eq!(sft[0].parts, vec![vec![0, 99], vec![1]]);
        // The first pair has no candidate for `rejected` besides its own prompt; then a
        // pair rejects a document more than REJECT_GAP back, or half the way back.
        assert_eq!(dpo.len(), n - 2);
        assert_eq!(dpo[0].parts[1], vec![2]);
        assert_eq!(dpo[0].parts[2], vec![0]);
        for d in &dpo {
            let (prompt, chosen, rejected) = (d.parts[0][0], d.parts[1][0], d.parts[2][0]);
            assert_eq!(d.parts[0], vec![prompt, 99]);
            assert_eq!(chosen, prompt + 1);
            let gap = (REJECT_GAP as u32).min(chosen / 2);
            assert!(chosen - rejected > gap, "{chosen} rejects {rejected}");
        }
    }

    #[test]
    fn held_out_responses_are_never_training_responses() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("d.jsonl");
        let mut w = DocWriter::create(&p).unwrap();
        let n = REJECT_GAP + 3 * REJECT_POOL;
        for i in 0..n {
            w.write(&format!("S:\nspeech {i}")).unwrap();
        }
        w.finish().unwrap();
        // Id = the document's position; every seventh prompt is held out.
        let id = |t: &str| t.rsplit(' ').next().unwrap().parse::<u32>().unwrap();
        let encode = |batch: Vec<&str>| -> Result<Vec<Vec<u32>>> {
            Ok(batch.iter().map(|t| vec![id(t)]).collect())
        };
        let heldout = |key: &str| id(key) % 7 == 3;
        let mut dpo = Vec::new();
        derive(
            &p,
            5,
            DERIVED_MAX,
            &[u32::MAX],
            &encode,
            &heldout,
            None,
            Some(&mut |d| {
                dpo.push(d);
                Ok(())
            }),
        )
        .unwrap();
        // A document answered the prompt just before it, so it is a held-out response
        // when its predecessor is a held-out prompt.
        let held_response = |doc: u32| doc > 0 && (doc - 1) % 7 == 3;
        let (mut held, mut train) = (0, 0);
        for d in &dpo {
            let (prompt, chosen, rejected) = (d.parts[0][0], d.parts[1][0], d.parts[2][0]);
            assert_eq!(chosen, prompt + 1);
            assert_ne!(rejected, chosen);
            assert_ne!(rejected, prompt);
            let back = (chosen - rejected) as usize;
            let gap = REJECT_GAP.min(chosen as usize / 2);
            assert!(back > gap && back <= REJECT_GAP + REJECT_POOL, "{back}");
            if heldout(&d.key) {
                held += 1;
                // The first document answers no prompt and may be drawn by either split.
                assert!(
                    held_response(rejected) || rejected == 0,
                    "held-out pair rejects {rejected}"
                );
            } else {
                train += 1;
                assert!(!held_response(rejected), "training pair rejects {rejected}");
            }
        }
        let paired = n - 2;
        assert!(
            held > paired / 8 && train > paired / 2,
            "{held} held out, {train} training"
        );
    }

    #[test]
    fn derivation_stops_reading_once_both_sets_are_full() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("d.jsonl");
        let mut w = DocWriter::create(&p).unwrap();
        for i in 0..10 * BATCH {
            w.write(&format!("S:\nspeech {i}")).unwrap();
        }
        w.finish().unwrap();
        let encoded = std::cell::Cell::new(0usize);
        let encode = |batch: Vec<&str>| -> Result<Vec<Vec<u32>>> {
            encoded.set(encoded.get() + batch.len());
            Ok(batch.iter().map(|t| vec![t.len() as u32]).collect())
        };
        let (mut n_sft, mut n_dpo) = (0, 0);
        derive(
            &p,
            1,
            3,
            &[0],
            &encode,
            &|_| false,
            Some(&mut |_| {
                n_sft += 1;
                Ok(())
            }),
            Some(&mut |_| {
                n_dpo += 1;
                Ok(())
            }),
        )
        .unwrap();
        assert_eq!((n_sft, n_dpo), (3, 3));
        assert_eq!(encoded.get(), BATCH, "one batch was enough");
    }

    #[test]
    fn jsonl_errors_name_file_and_line() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("sft.jsonl");
        std::fs::write(
            &p,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\"}]}\n\
             {\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}\n",
        )
        .unwrap();
        let mut n = 0;
        let err = sft_from_jsonl(&p, |_| {
            n += 1;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(n, 1);
        assert!(format!("{err:#}").contains("sft.jsonl:2"), "{err:#}");
        std::fs::write(&p, "{\"prompt\":\"p\"}\n").unwrap();
        let err = dpo_from_jsonl(&p, |_| Ok(())).unwrap_err();
        assert!(format!("{err:#}").contains("sft.jsonl:1"), "{err:#}");
    }
}
