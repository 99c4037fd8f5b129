//! The byte-level BPE tokenizer: trained on a sample of the training shards, saved as
//! HF `tokenizer.json`. Byte-level with no normaliser and no prefix space, so decoding
//! the ids of any text gives the text back exactly.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, Model, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

use lavender::config::TokenizerConfig;

/// End of text; also the beginning-of-sequence token, as in GPT-2.
pub const EOS: &str = "<|endoftext|>";
pub const PAD: &str = "<|pad|>";
/// Text the tokenizer is trained on, at most; spread over all training shards. BPE merges
/// settle long before this on natural text, and it bounds the step's time and memory.
pub const SAMPLE_BYTES: u64 = 64 << 20;

pub struct Trained {
    pub tokenizer: Tokenizer,
    pub vocab_size: u32,
    pub eos_id: u32,
    pub pad_id: u32,
}

fn byte_level() -> ByteLevel {
    ByteLevel::new(false, false, false)
}

/// GPT-2's split pattern without its one lookahead (`\s+(?!\S)`): with the `fancy-regex`
/// backend a lookahead makes every match run on the backtracking VM, several times slower,
/// while without it the pattern runs on the `regex` crate. The only difference: a run
/// of spaces before a word keeps all its spaces instead of lending the last to the word.
const SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

fn pre_tokenizer() -> Result<PreTokenizerWrapper> {
    let split = Split::new(
        SplitPattern::Regex(SPLIT.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| anyhow!("the split pattern does not compile: {e}"))?;
    Ok(Sequence::new(vec![split.into(), byte_level().into()]).into())
}

/// Train on the documents of `files` (JSONL document files), at most `SAMPLE_BYTES`.
pub fn train(files: &[PathBuf], cfg: &TokenizerConfig) -> Result<Trained> {
    let per_file = (SAMPLE_BYTES / files.len().max(1) as u64).max(1);
    let sample = Sample::new(files.to_vec(), per_file);
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .show_progress(false)
        .vocab_size(cfg.vocab_size as usize)
        .min_frequency(cfg.min_frequency as u64)
        .special_tokens(vec![
            AddedToken::from(EOS, true),
            AddedToken::from(PAD, true),
        ])
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build()
        .into();
    let mut tokenizer = Tokenizer::new(BPE::default());
    tokenizer
        .with_pre_tokenizer(Some(pre_tokenizer()?))
        .with_post_processor(Some(byte_level()))
        .with_decoder(Some(byte_level()));
    let errors = sample.errors.clone();
    tokenizer
        .train(&mut trainer, sample)
        .map_err(|e| anyhow!("training the tokenizer failed: {e}"))?;
    if let Some(e) = errors.lock().expect("no panics while holding it").take() {
        return Err(e);
    }
    finish(tokenizer)
}

/// A checkpoint's own tokenizer (`model.init_from`'s `tokenizer.json`), as is. Its end
/// of text is `<|endoftext|>` (or `</s>`, `<eos>`); its pad token `<|pad|>` or `<pad>`
/// when it has one, else the end of text.
pub fn pretrained(p: &crate::model::pretrained::Pretrained) -> Result<Trained> {
    let path = &p.tokenizer;
    let tokenizer = Tokenizer::from_file(path).map_err(|e| {
        anyhow!(
            "{} is not a tokenizer.json the tokenizers library reads: {e}",
            path.display()
        )
    })?;
    let find = |names: &[&str]| names.iter().find_map(|n| tokenizer.token_to_id(n));
    let eos_id = find(&[EOS, "</s>", "<eos>"]).with_context(|| {
        format!(
            "{} has no end-of-text token ({EOS}, </s> or <eos>); lavender ends every document with one: add it as a special token",
            path.display()
        )
    })?;
    let vocab_size = tokenizer.get_vocab_size(true) as u32;
    anyhow::ensure!(
        vocab_size <= p.shape.vocab_size,
        "{} has {vocab_size} tokens, more than the model's vocab_size {} in {}; the tokenizer is not this model's",
        path.display(),
        p.shape.vocab_size,
        p.dir.join(crate::model::pretrained::CONFIG_JSON).display()
    );
    Ok(Trained {
        vocab_size,
        eos_id,
        pad_id: find(&[PAD, "<pad>"]).unwrap_or(eos_id),
        tokenizer,
    })
}

fn finish(tokenizer: Tokenizer) -> Result<Trained> {
    let id = |t: &str| {
        tokenizer
            .token_to_id(t)
            .with_context(|| format!("the tokenizer has no {t} token"))
    };
    Ok(Trained {
        vocab_size: tokenizer.get_vocab_size(true) as u32,
        eos_id: id(EOS)?,
        pad_id: id(PAD)?,
        tokenizer,
    })
}

pub fn save(t: &Trained, path: &Path) -> Result<()> {
    t.tokenizer
        .save(path, true)
        .map_err(|e| anyhow!("could not write {}: {e}", path.display()))
}

/// Token ids of many texts at once (in parallel), without special tokens, through the
/// tokenizer's full pipeline (offsets, alignments and all).
pub fn encode_many(t: &Tokenizer, texts: Vec<&str>) -> Result<Vec<Vec<u32>>> {
    let encodings = t
        .encode_batch_fast(texts, false)
        .map_err(|e| anyhow!("tokenizing failed: {e}"))?;
    Ok(encodings
        .into_iter()
        .map(|e| e.get_ids().to_vec())
        .collect())
}

/// Words (pieces of the split pattern) each thread remembers the ids of; natural text's
/// frequent words fit many times over, and the bound keeps memory flat on any corpus.
const WORD_CACHE: usize = 200_000;

/// The ids [`encode_many`] gives, several times faster: precompute needs only ids, and
/// the tokenizer's pipeline spends most of its time allocating offsets and alignments
/// for every byte. This splits with the same pattern, maps bytes to GPT-2's byte
/// alphabet, runs the BPE model on each piece, and remembers the ids of each piece. A
/// text holding a special token's content goes through the full pipeline (which
/// matches those first).
pub struct Encoder<'t> {
    tok: &'t Tokenizer,
    /// Through the tokenizer's own pipeline: a tokenizer lavender did not train (its
    /// split and normalisation may differ from the fast path's).
    full: bool,
    split: regex::Regex,
    byte_chars: [char; 256],
    specials: Vec<String>,
    caches: Vec<std::sync::Mutex<std::collections::HashMap<String, Vec<u32>>>>,
}

impl<'t> Encoder<'t> {
    /// The fast path, for a tokenizer [`train`] made.
    pub fn new(tok: &'t Tokenizer) -> Result<Encoder<'t>> {
        Encoder::with(tok, false)
    }

    /// Any tokenizer, through its own pipeline.
    pub fn full_pipeline(tok: &'t Tokenizer) -> Result<Encoder<'t>> {
        Encoder::with(tok, true)
    }

    fn with(tok: &'t Tokenizer, full: bool) -> Result<Encoder<'t>> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(Encoder {
            tok,
            full,
            split: regex::Regex::new(SPLIT)
                .map_err(|e| anyhow!("the split pattern does not compile: {e}"))?,
            byte_chars: lavender::tokens::byte_alphabet(),
            specials: tok
                .get_added_tokens_decoder()
                .values()
                .map(|t| t.content.clone())
                .filter(|c| !c.is_empty())
                .collect(),
            caches: (0..threads).map(|_| Default::default()).collect(),
        })
    }

    /// Token ids of many texts, split over the threads; the same ids as [`encode_many`].
    pub fn encode_many(&self, texts: Vec<&str>) -> Result<Vec<Vec<u32>>> {
        if self.full {
            return encode_many(self.tok, texts);
        }
        let per = texts.len().div_ceil(self.caches.len()).max(1);
        let parts: Vec<Result<Vec<Vec<u32>>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = texts
                .chunks(per)
                .zip(&self.caches)
                .map(|(chunk, cache)| {
                    scope.spawn(move || {
                        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
                        chunk
                            .iter()
                            .map(|t| self.encode(&mut cache, t))
                            .collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("a tokenizing thread panicked")))
                })
                .collect()
        });
        let mut out = Vec::with_capacity(texts.len());
        for p in parts {
            out.extend(p?);
        }
        Ok(out)
    }

    fn encode(
        &self,
        cache: &mut std::collections::HashMap<String, Vec<u32>>,
        text: &str,
    ) -> Result<Vec<u32>> {
        if self.specials.iter().any(|s| text.contains(s.as_str())) {
            return Ok(encode_many(self.tok, vec![text])?.remove(0));
        }
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        let mut mapped = String::new();
        let mut piece_ids = |piece: &str, ids: &mut Vec<u32>| -> Result<()> {
            if let Some(known) = cache.get(piece) {
                ids.extend_from_slice(known);
                return Ok(());
            }
            mapped.clear();
            mapped.extend(piece.bytes().map(|b| self.byte_chars[b as usize]));
            let new: Vec<u32> = self
                .tok
                .get_model()
                .tokenize(&mapped)
                .map_err(|e| anyhow!("tokenizing failed: {e}"))?
                .into_iter()
                .map(|t| t.id)
                .collect();
            ids.extend_from_slice(&new);
            if cache.len() < WORD_CACHE {
                cache.insert(piece.to_string(), new);
            }
            Ok(())
        };
        // Every character matches the pattern, but text between matches would be a piece
        // of its own (the split is `Isolated`), so gaps are handled all the same.
        let mut last = 0;
        for m in self.split.find_iter(text) {
            if m.start() > last {
                piece_ids(&text[last..m.start()], &mut ids)?;
            }
            piece_ids(m.as_str(), &mut ids)?;
            last = m.end();
        }
        if last < text.len() {
            piece_ids(&text[last..], &mut ids)?;
        }
        Ok(ids)
    }
}

/// Streams document texts from JSONL document files, up to `per_file` bytes of each.
/// The trainer wants an `Iterator + Send`, so read errors are parked in `errors` and
/// end the iteration; `train` reports them.
struct Sample {
    files: std::vec::IntoIter<PathBuf>,
    current: Option<(PathBuf, BufReader<File>, u64)>,
    per_file: u64,
    line: String,
    errors: std::sync::Arc<std::sync::Mutex<Option<anyhow::Error>>>,
}

impl Sample {
    fn new(files: Vec<PathBuf>, per_file: u64) -> Sample {
        Sample {
            files: files.into_iter(),
            current: None,
            per_file,
            line: String::new(),
            errors: Default::default(),
        }
    }

    fn fail(&mut self, e: anyhow::Error) -> Option<String> {
        *self.errors.lock().expect("no panics while holding it") = Some(e);
        None
    }
}

impl Iterator for Sample {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        loop {
            if self.current.is_none() {
                let path = self.files.next()?;
                match File::open(&path) {
                    Ok(f) => self.current = Some((path, BufReader::new(f), 0)),
                    Err(e) => {
                        return self.fail(anyhow!("could not open {}: {e}", path.display()));
                    }
                }
            }
            let (path, reader, read) = self.current.as_mut().expect("just set");
            self.line.clear();
            match reader.read_line(&mut self.line) {
                Ok(0) => self.current = None,
                Ok(n) if *read < self.per_file => {
                    *read += n as u64;
                    match serde_json::from_str::<serde_json::Value>(&self.line) {
                        Ok(v) => return Some(v["text"].as_str().unwrap_or_default().to_string()),
                        Err(e) => {
                            let msg = anyhow!("{} has a malformed line: {e}", path.display());
                            return self.fail(msg);
                        }
                    }
                }
                Ok(_) => self.current = None,
                Err(e) => {
                    let msg = anyhow!("could not read {}: {e}", path.display());
                    return self.fail(msg);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::documents::DocWriter;

    /// A tokenizer trained on a few hundred lines of the embedded corpus's start.
    fn trained(dir: &Path) -> Trained {
        let gz = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../data/tinyshakespeare.txt.gz"
        ))
        .unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text)
            .unwrap();
        let p = dir.join("d.jsonl");
        let mut w = DocWriter::create(&p).unwrap();
        for doc in text.split("\n\n").take(600) {
            w.write(doc).unwrap();
        }
        w.finish().unwrap();
        let cfg = TokenizerConfig {
            vocab_size: 600,
            min_frequency: 2,
        };
        train(&[p], &cfg).unwrap()
    }

    #[test]
    fn the_fast_encoder_gives_the_pipelines_ids() {
        let tmp = tempfile::tempdir().unwrap();
        let t = trained(tmp.path());
        let enc = Encoder::new(&t.tokenizer).unwrap();
        let texts = [
            "First Citizen:\nBefore we proceed any further, hear me speak.",
            "",
            "   leading spaces,  two  spaces, tabs\t\tand\r\nCRLF\n\n\n",
            "numbers 12345 and 3.14159, 1st 2nd; it's they're we've I'm you'll he'd 'tis",
            "ünïcødé ✓ 漢字 🙂 — «quotes» \u{0}\u{7f}\u{a0}nbsp",
            "special <|endoftext|> inside <|pad|> text",
            "trailing spaces   ",
            "!!!???...---",
        ];
        let want = encode_many(&t.tokenizer, texts.to_vec()).unwrap();
        // Twice: the second pass reads every piece from the caches.
        for _ in 0..2 {
            assert_eq!(enc.encode_many(texts.to_vec()).unwrap(), want);
        }
        let ids = &want[5];
        assert!(
            ids.contains(&t.eos_id) && ids.contains(&t.pad_id),
            "{ids:?}"
        );
        // Many texts spread over the threads come back in order.
        let many: Vec<String> = (0..1000).map(|i| format!("word{i} and {i}:\n")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            enc.encode_many(many.clone()).unwrap(),
            encode_many(&t.tokenizer, many).unwrap()
        );
    }
}
