//! The token-array format: what `precompute` writes and the trainer and
//! `lavenderd attribute` read; how pretraining cuts a token array into windows; and how
//! a token id reads back as bytes. The worker's `tokens` module writes and memory-maps
//! the files.
//!
//! Layout under `<data_root>/tokens/`:
//!
//! ```text
//! tokenizer.json            HF tokenizers format (byte-level BPE)
//! index.json                [`TokenIndex`] (written after every file it names)
//! pretrain/shard-00000.bin  one file per shard of shards/manifest.json
//! pretrain/validation.bin
//! sft/train.bin  sft/train.idx  sft/heldout.bin  sft/heldout.idx
//! dpo/train.bin  dpo/train.idx  dpo/heldout.bin  dpo/heldout.idx
//! ```
//!
//! `index.json`:
//! `{"format":1,"dtype":"u16"|"u32","vocab_size":N,"bos_id":n,"eos_id":n,"pad_id":n,
//!   "pretrain":{"shards":[{"shard":"shard-00000","file":"pretrain/shard-00000.bin","tokens":N}],
//!               "validation":{"file":"pretrain/validation.bin","tokens":N}},
//!   "sft":{"train":{"file":"sft/train.bin","index":"sft/train.idx","count":N},"heldout":{…}},
//!   "dpo":{"train":{"file":"dpo/train.bin","index":"dpo/train.idx","count":N},"heldout":{…}}}`
//!
//! - `.bin`: little-endian token ids of `dtype` (`u16` when the vocabulary fits, else `u32`).
//!   A pretrain shard is its documents' tokens, each document followed by `eos_id`.
//! - `.idx`: little-endian `u64` records. SFT: `(offset, prompt_len, response_len)`;
//!   DPO: `(offset, prompt_len, chosen_len, rejected_len)`. `offset` counts tokens from the
//!   start of the matching `.bin`; the data there is prompt then response (SFT) or prompt,
//!   chosen, rejected (DPO). Every part after the prompt ends with `eos_id` (so a model
//!   learns where a response stops); prompts do not.
//! - `bos_id` equals `eos_id` (`<|endoftext|>`, as in GPT-2); `pad_id` is `<|pad|>`.
//!
//! The worker checks every file's size against the index when it maps it, so a
//! truncated or mismatched file is an error at open, never a wrong answer or a panic
//! later.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};

/// The version of this format; [`TokenIndex::read`] refuses any other.
pub const FORMAT: u32 = 1;
pub const INDEX_FILE: &str = "index.json";
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// Number of chunks a pipeline's shards are split into (`--chunk 1..=4`).
pub const CHUNKS: u8 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    U16,
    U32,
}

impl Dtype {
    /// The narrowest dtype that holds every id of a vocabulary of `vocab_size`.
    pub fn for_vocab(vocab_size: u32) -> Dtype {
        if vocab_size <= u16::MAX as u32 + 1 {
            Dtype::U16
        } else {
            Dtype::U32
        }
    }

    pub fn width(self) -> usize {
        match self {
            Dtype::U16 => 2,
            Dtype::U32 => 4,
        }
    }

    /// The token ids in `bytes` (little-endian, a whole number of tokens; a trailing
    /// part of a token is ignored).
    pub fn decode(self, bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
        bytes.chunks_exact(self.width()).map(move |c| match self {
            Dtype::U16 => u32::from(u16::from_le_bytes([c[0], c[1]])),
            Dtype::U32 => u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenIndex {
    pub format: u32,
    pub dtype: Dtype,
    pub vocab_size: u32,
    pub bos_id: u32,
    pub eos_id: u32,
    pub pad_id: u32,
    pub pretrain: PretrainIndex,
    pub sft: SplitFiles,
    pub dpo: SplitFiles,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PretrainIndex {
    pub shards: Vec<ShardFile>,
    pub validation: ArrayFile,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardFile {
    pub shard: String,
    pub file: String,
    pub tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArrayFile {
    pub file: String,
    pub tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitFiles {
    pub train: RecordFile,
    pub heldout: RecordFile,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordFile {
    pub file: String,
    pub index: String,
    pub count: u64,
}

impl TokenIndex {
    pub fn shard_names(&self) -> Vec<String> {
        self.pretrain
            .shards
            .iter()
            .map(|s| s.shard.clone())
            .collect()
    }
}

/// The start of every pretraining window of a token array of `len` tokens: windows
/// of `seq_len + 1` tokens (inputs and their next-token labels), cut from the start
/// without overlap, `seq_len` apart, as long as a whole window fits.
pub fn pretrain_window_starts(len: usize, seq_len: usize) -> impl Iterator<Item = usize> {
    (0..)
        .map(move |k| k * seq_len.max(1))
        .take_while(move |start| start + seq_len < len)
}

/// GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, every other byte
/// for the next unused code point from U+0100 on, in byte order. A byte-level BPE
/// token's string is its bytes in this alphabet.
pub fn byte_alphabet() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        out[b as usize] = if printable(b) {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).expect("U+0100..U+0143 are chars")
        };
    }
    out
}

/// The bytes of every token of a byte-level BPE `tokenizer.json` (lavender's: no
/// normalizer, no prefix space), so ids read back as the exact text they encode.
#[derive(Debug, Clone)]
pub struct TokenBytes {
    bytes: Vec<Vec<u8>>,
}

impl TokenBytes {
    pub fn read(tokenizer_json: &Path) -> Result<TokenBytes> {
        let text = std::fs::read(tokenizer_json).ctx("read", tokenizer_json)?;
        #[derive(Deserialize)]
        struct Added {
            id: usize,
            content: String,
        }
        #[derive(Deserialize)]
        struct Model {
            vocab: HashMap<String, usize>,
        }
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            added_tokens: Vec<Added>,
            model: Model,
        }
        let f: File = serde_json::from_slice(&text).map_err(|e| Error::Malformed {
            path: tokenizer_json.to_path_buf(),
            reason: format!("not a tokenizer.json with a model vocabulary: {e}"),
        })?;
        let mut byte_of: HashMap<char, u8> = HashMap::new();
        for (b, c) in byte_alphabet().iter().enumerate() {
            byte_of.insert(*c, b as u8);
        }
        let n = f
            .model
            .vocab
            .values()
            .chain(f.added_tokens.iter().map(|a| &a.id))
            .max()
            .map_or(0, |m| m + 1);
        let mut bytes = vec![Vec::new(); n];
        for (token, id) in f.model.vocab {
            // A character outside the alphabet cannot come from a byte-level model;
            // its UTF-8 stands for itself.
            bytes[id] = token
                .chars()
                .flat_map(|c| match byte_of.get(&c) {
                    Some(b) => vec![*b],
                    None => c.to_string().into_bytes(),
                })
                .collect();
        }
        for a in f.added_tokens {
            bytes[a.id] = a.content.into_bytes();
        }
        Ok(TokenBytes { bytes })
    }

    /// The bytes `id` stands for (none for an id the vocabulary lacks).
    pub fn of(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }
}

/// Reads a token array file of `dtype` whole.
pub fn read_array(path: &Path, dtype: Dtype) -> Result<Vec<u32>> {
    let bytes = std::fs::read(path).ctx("read", path)?;
    let w = dtype.width();
    if bytes.len() % w != 0 {
        return Err(Error::Malformed {
            path: path.to_path_buf(),
            reason: format!(
                "{} bytes are not a whole number of {w}-byte tokens",
                bytes.len()
            ),
        });
    }
    Ok(dtype.decode(&bytes).collect())
}

impl TokenIndex {
    /// Reads `<tokens_dir>/index.json`; an index of another [`FORMAT`] is an error.
    pub fn read(tokens_dir: &Path) -> Result<TokenIndex> {
        let path = tokens_dir.join(INDEX_FILE);
        let text = std::fs::read(&path).ctx("read", &path)?;
        let index: TokenIndex = serde_json::from_slice(&text).map_err(|e| Error::Malformed {
            path: path.clone(),
            reason: format!("not a token index: {e}"),
        })?;
        if index.format != FORMAT {
            return Err(Error::Malformed {
                path,
                reason: format!(
                    "token format {}, this build reads format {FORMAT}; rerun `lavender-worker precompute --force`",
                    index.format
                ),
            });
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_start_a_seq_len_apart_while_a_whole_window_fits() {
        let starts: Vec<usize> = pretrain_window_starts(10, 3).collect();
        // Windows of 4 tokens: 0..4, 3..7, 6..10; 9..13 does not fit.
        assert_eq!(starts, [0, 3, 6]);
        assert_eq!(pretrain_window_starts(4, 3).count(), 1);
        assert_eq!(pretrain_window_starts(3, 3).count(), 0);
    }

    #[test]
    fn token_bytes_read_back_the_text() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokenizer.json");
        // "Ġ" is the space byte in GPT-2's alphabet; "Ã©" is é's two bytes.
        std::fs::write(
            &p,
            r#"{"added_tokens": [{"id": 3, "content": "<|endoftext|>"}],
                "model": {"vocab": {"a": 0, "Ġb": 1, "Ã©": 2}}}"#,
        )
        .unwrap();
        let t = TokenBytes::read(&p).unwrap();
        let text: Vec<u8> = [0u32, 1, 2, 3]
            .iter()
            .flat_map(|&i| t.of(i).to_vec())
            .collect();
        assert_eq!(String::from_utf8(text).unwrap(), "a bé<|endoftext|>");
    }
}
