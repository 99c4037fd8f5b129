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
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

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

/// Load a saved tokenizer and find its special tokens.
#[allow(dead_code)] // used by tests and by the trainer once it loads tokens/tokenizer.json
pub fn load(path: &Path) -> Result<Trained> {
    let tokenizer = Tokenizer::from_file(path)
        .map_err(|e| anyhow!("could not load tokenizer {}: {e}", path.display()))?;
    finish(tokenizer)
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

/// Token ids of many texts at once (in parallel), without special tokens.
pub fn encode_many(t: &Tokenizer, texts: Vec<&str>) -> Result<Vec<Vec<u32>>> {
    let encodings = t
        .encode_batch_fast(texts, false)
        .map_err(|e| anyhow!("tokenizing failed: {e}"))?;
    Ok(encodings
        .into_iter()
        .map(|e| e.get_ids().to_vec())
        .collect())
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
