//! The token arrays' reader and writers: `precompute` writes them with [`ArrayWriter`],
//! [`RecordWriter`] and [`write_index`]; the trainer reads them memory-mapped
//! ([`Tokens`], [`TokenArray`]). The format (files, dtypes, records, the index) is
//! the core's `lavender::tokens`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use memmap2::Mmap;

pub use lavender::tokens::{
    ArrayFile, CHUNKS, Dtype, FORMAT, INDEX_FILE, PretrainIndex, RecordFile, ShardFile, SplitFiles,
    TOKENIZER_FILE, TokenIndex,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Heldout,
}

/// An opened `tokens/` directory.
#[derive(Debug)]
pub struct Tokens {
    pub index: TokenIndex,
    dir: PathBuf,
}

impl Tokens {
    pub fn open(tokens_dir: &Path) -> Result<Tokens> {
        let index = TokenIndex::read(tokens_dir).with_context(|| {
            format!(
                "could not read the token index {}; run `lavender-worker precompute` first",
                tokens_dir.join(INDEX_FILE).display()
            )
        })?;
        Ok(Tokens {
            index,
            dir: tokens_dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn tokenizer_path(&self) -> PathBuf {
        self.dir.join(TOKENIZER_FILE)
    }

    pub fn pretrain_shard(&self, shard: &str) -> Result<TokenArray> {
        let Some(entry) = self.index.pretrain.shards.iter().find(|s| s.shard == shard) else {
            bail!(
                "shard {shard:?} is not in {} (it has {} shards: {}); rerun precompute after build_shards",
                self.dir.join(INDEX_FILE).display(),
                self.index.pretrain.shards.len(),
                abbreviate(&self.index.shard_names())
            );
        };
        self.array(&entry.file, entry.tokens)
    }

    pub fn pretrain_validation(&self) -> Result<TokenArray> {
        let v = &self.index.pretrain.validation;
        self.array(&v.file, v.tokens)
    }

    /// The shards a run of `(chunk, scale_shards)` trains on, each checked to exist here.
    pub fn select_shards(&self, chunk: u8, scale_shards: u32) -> Result<Vec<String>> {
        ensure!(
            (1..=CHUNKS).contains(&chunk),
            "chunk {chunk} is out of range: use 1..={CHUNKS}"
        );
        let chosen = select_shards(&self.index.shard_names(), chunk, scale_shards);
        ensure!(
            !chosen.is_empty(),
            "{} lists no pretrain shards; rerun build_shards and precompute",
            self.dir.join(INDEX_FILE).display()
        );
        Ok(chosen)
    }

    pub fn sft(&self, split: Split) -> Result<SftSet> {
        let f = match split {
            Split::Train => &self.index.sft.train,
            Split::Heldout => &self.index.sft.heldout,
        };
        Ok(SftSet(self.records(f, 2)?))
    }

    pub fn dpo(&self, split: Split) -> Result<DpoSet> {
        let f = match split {
            Split::Train => &self.index.dpo.train,
            Split::Heldout => &self.index.dpo.heldout,
        };
        Ok(DpoSet(self.records(f, 3)?))
    }

    fn array(&self, file: &str, tokens: u64) -> Result<TokenArray> {
        TokenArray::open(&self.dir.join(file), self.index.dtype, tokens)
    }

    fn records(&self, f: &RecordFile, parts: usize) -> Result<Records> {
        let data = self.array(&f.file, u64::MAX)?;
        let idx_path = self.dir.join(&f.index);
        let idx = map(&idx_path)?;
        let record_bytes = 8 * (1 + parts);
        ensure!(
            idx.len() as u64 == f.count * record_bytes as u64,
            "{} has {} bytes, the index says {} records of {record_bytes} bytes; rerun precompute --force",
            idx_path.display(),
            idx.len(),
            f.count
        );
        let records = Records {
            data,
            idx,
            parts,
            count: f.count as usize,
        };
        // Check every record lies inside the data file, so `get` cannot go out of bounds.
        for i in 0..records.count {
            let (offset, lens) = records.raw(i);
            let end = lens.iter().try_fold(offset, |a, &l| a.checked_add(l));
            ensure!(
                end.is_some_and(|e| e <= records.data.len() as u64),
                "record {i} of {} points past the end of its data file {}; rerun precompute --force",
                idx_path.display(),
                records.data.path.display()
            );
        }
        Ok(records)
    }
}

fn abbreviate(names: &[String]) -> String {
    match names.len() {
        0 => "none".into(),
        1..=4 => names.join(", "),
        n => format!("{}, …, {}", names[..3].join(", "), names[n - 1]),
    }
}

fn map(path: &Path) -> Result<Mmap> {
    let file = File::open(path)
        .with_context(|| format!("could not open token file {}", path.display()))?;
    // SAFETY: token files are written once to a temporary name and renamed into place;
    // nothing writes to a committed file, so the mapping does not change under us.
    unsafe { Mmap::map(&file) }.with_context(|| format!("could not map {}", path.display()))
}

/// A memory-mapped array of token ids.
#[derive(Debug)]
pub struct TokenArray {
    map: Option<Mmap>,
    dtype: Dtype,
    len: usize,
    path: PathBuf,
}

impl TokenArray {
    /// Opens `path`; `tokens == u64::MAX` skips the length check (record data files).
    pub fn open(path: &Path, dtype: Dtype, tokens: u64) -> Result<TokenArray> {
        let meta = std::fs::metadata(path)
            .with_context(|| format!("could not open token file {}", path.display()))?;
        let bytes = meta.len();
        let width = dtype.width() as u64;
        ensure!(
            bytes % width == 0,
            "{} has {bytes} bytes, not a whole number of {width}-byte tokens; rerun precompute --force",
            path.display()
        );
        ensure!(
            tokens == u64::MAX || bytes == tokens * width,
            "{} holds {} tokens, the index says {tokens}; rerun precompute --force",
            path.display(),
            bytes / width
        );
        // Empty files cannot be mapped on every platform; an empty array needs no mapping.
        let map = if bytes == 0 { None } else { Some(map(path)?) };
        Ok(TokenArray {
            map,
            dtype,
            len: (bytes / width) as usize,
            path: path.to_path_buf(),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Token ids `start..start + len` as i64 (what tch's `Tensor::from_slice` wants).
    /// Panics if the window leaves the array: callers pick windows from `len()`.
    pub fn window(&self, start: usize, len: usize) -> Vec<i64> {
        assert!(
            start.checked_add(len).is_some_and(|e| e <= self.len),
            "window {start}..{} is outside {} ({} tokens)",
            start.saturating_add(len),
            self.path.display(),
            self.len
        );
        let bytes = self.map.as_deref().unwrap_or(&[]);
        let w = self.dtype.width();
        self.dtype
            .decode(&bytes[start * w..(start + len) * w])
            .map(i64::from)
            .collect()
    }
}

#[derive(Debug)]
struct Records {
    data: TokenArray,
    idx: Mmap,
    parts: usize,
    count: usize,
}

impl Records {
    fn raw(&self, i: usize) -> (u64, Vec<u64>) {
        let rec = 8 * (1 + self.parts);
        let bytes = &self.idx[i * rec..(i + 1) * rec];
        let mut words = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")));
        let offset = words.next().expect("record has an offset");
        (offset, words.collect())
    }

    /// The record's parts, in order. Bounds were checked at open.
    fn get(&self, i: usize) -> Vec<Vec<i64>> {
        assert!(i < self.count, "record {i} of {} records", self.count);
        let (mut at, lens) = self.raw(i);
        lens.into_iter()
            .map(|l| {
                let part = self.data.window(at as usize, l as usize);
                at += l;
                part
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SftSample {
    pub prompt: Vec<i64>,
    pub response: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpoPair {
    pub prompt: Vec<i64>,
    pub chosen: Vec<i64>,
    pub rejected: Vec<i64>,
}

#[derive(Debug)]
pub struct SftSet(Records);

impl SftSet {
    pub fn len(&self) -> usize {
        self.0.count
    }

    pub fn is_empty(&self) -> bool {
        self.0.count == 0
    }

    pub fn get(&self, i: usize) -> SftSample {
        let mut parts = self.0.get(i).into_iter();
        SftSample {
            prompt: parts.next().unwrap_or_default(),
            response: parts.next().unwrap_or_default(),
        }
    }
}

#[derive(Debug)]
pub struct DpoSet(Records);

impl DpoSet {
    pub fn len(&self) -> usize {
        self.0.count
    }

    pub fn is_empty(&self) -> bool {
        self.0.count == 0
    }

    pub fn get(&self, i: usize) -> DpoPair {
        let mut parts = self.0.get(i).into_iter();
        DpoPair {
            prompt: parts.next().unwrap_or_default(),
            chosen: parts.next().unwrap_or_default(),
            rejected: parts.next().unwrap_or_default(),
        }
    }
}

/// Which shards a run of `(chunk, scale_shards)` trains on.
///
/// The scale takes the first `scale_shards` shards in manifest order (all of them when
/// there are fewer); those split into [`CHUNKS`] contiguous, balanced, disjoint slices and
/// `chunk` (1-based) picks one. Every selected shard therefore belongs to exactly one chunk
/// and the chunks together cover them all. With fewer selected shards than chunks, chunk k
/// reuses shard `(k-1) % n` so every chunk has data. Names are returned exactly as given,
/// so they always match the manifest they came from. An out-of-range chunk gets nothing.
pub fn select_shards(
    shards_manifest_names: &[String],
    chunk: u8,
    scale_shards: u32,
) -> Vec<String> {
    if !(1..=CHUNKS).contains(&chunk) || shards_manifest_names.is_empty() {
        return Vec::new();
    }
    let n = shards_manifest_names
        .len()
        .min(scale_shards.max(1) as usize);
    let selected = &shards_manifest_names[..n];
    let k = (chunk - 1) as usize;
    let chunks = CHUNKS as usize;
    if n < chunks {
        return vec![selected[k % n].clone()];
    }
    selected[k * n / chunks..(k + 1) * n / chunks].to_vec()
}

/// Writes one `.bin` array, streaming, to a file that the caller commits by renaming
/// (precompute builds the whole `tokens/` directory in a staging directory).
pub struct ArrayWriter {
    out: BufWriter<File>,
    dtype: Dtype,
    tokens: u64,
    path: PathBuf,
}

impl ArrayWriter {
    pub fn create(path: &Path, dtype: Dtype) -> Result<ArrayWriter> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("could not create {}", parent.display()))?;
        }
        let file = File::create(path)
            .with_context(|| format!("could not create token file {}", path.display()))?;
        Ok(ArrayWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            dtype,
            tokens: 0,
            path: path.to_path_buf(),
        })
    }

    pub fn push(&mut self, ids: &[u32]) -> Result<()> {
        for &id in ids {
            match self.dtype {
                Dtype::U16 => {
                    let v = u16::try_from(id).with_context(|| {
                        format!(
                            "token id {id} does not fit the u16 array {}",
                            self.path.display()
                        )
                    })?;
                    self.out.write_all(&v.to_le_bytes())
                }
                Dtype::U32 => self.out.write_all(&id.to_le_bytes()),
            }
            .with_context(|| format!("could not write {}", self.path.display()))?;
        }
        self.tokens += ids.len() as u64;
        Ok(())
    }

    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Flushes; returns the number of tokens written. Not fsynced: the writer of a whole
    /// directory of arrays syncs it once before publishing it (precompute does).
    pub fn finish(self) -> Result<u64> {
        let path = self.path;
        self.out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("could not write {}", path.display()))?;
        Ok(self.tokens)
    }
}

/// Writes an SFT or DPO set: a `.bin` of concatenated parts and an `.idx` of records.
pub struct RecordWriter {
    data: ArrayWriter,
    idx: BufWriter<File>,
    idx_path: PathBuf,
    parts: usize,
    count: u64,
}

impl RecordWriter {
    /// `parts` is 2 for SFT (prompt, response) and 3 for DPO (prompt, chosen, rejected).
    pub fn create(bin: &Path, idx: &Path, dtype: Dtype, parts: usize) -> Result<RecordWriter> {
        let data = ArrayWriter::create(bin, dtype)?;
        let file = File::create(idx)
            .with_context(|| format!("could not create record index {}", idx.display()))?;
        Ok(RecordWriter {
            data,
            idx: BufWriter::new(file),
            idx_path: idx.to_path_buf(),
            parts,
            count: 0,
        })
    }

    pub fn push(&mut self, parts: &[&[u32]]) -> Result<()> {
        ensure!(
            parts.len() == self.parts,
            "a record of {} has {} parts, got {}",
            self.idx_path.display(),
            self.parts,
            parts.len()
        );
        let mut rec = Vec::with_capacity(8 * (1 + parts.len()));
        rec.extend_from_slice(&self.data.tokens().to_le_bytes());
        for p in parts {
            rec.extend_from_slice(&(p.len() as u64).to_le_bytes());
            self.data.push(p)?;
        }
        self.idx
            .write_all(&rec)
            .with_context(|| format!("could not write {}", self.idx_path.display()))?;
        self.count += 1;
        Ok(())
    }

    /// Flushes both files (not fsynced, as [`ArrayWriter::finish`]); returns the number
    /// of records.
    pub fn finish(self) -> Result<u64> {
        self.data.finish()?;
        let path = self.idx_path;
        self.idx
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("could not write {}", path.display()))?;
        Ok(self.count)
    }
}

/// Writes `index.json` into `tokens_dir` (temp file + rename; the index names only
/// files that are already complete, so it is written after them).
pub fn write_index(tokens_dir: &Path, index: &TokenIndex) -> Result<()> {
    Ok(lavender::atomic::write_json(
        &tokens_dir.join(INDEX_FILE),
        index,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("shard-{i:05}")).collect()
    }

    fn write_fixture(dir: &Path, dtype: Dtype) -> TokenIndex {
        let mut a = ArrayWriter::create(&dir.join("pretrain/shard-00000.bin"), dtype).unwrap();
        a.push(&[5, 6, 7, 0]).unwrap();
        a.push(&[8, 9, 0]).unwrap();
        let t0 = a.finish().unwrap();
        let mut a = ArrayWriter::create(&dir.join("pretrain/shard-00001.bin"), dtype).unwrap();
        a.push(&[
            70_000u32.min(if dtype == Dtype::U16 { 1 } else { 70_000 }),
            0,
        ])
        .unwrap();
        let t1 = a.finish().unwrap();
        let mut v = ArrayWriter::create(&dir.join("pretrain/validation.bin"), dtype).unwrap();
        v.push(&[3, 0]).unwrap();
        let tv = v.finish().unwrap();
        std::fs::create_dir_all(dir.join("sft")).unwrap();
        std::fs::create_dir_all(dir.join("dpo")).unwrap();
        let count = |kind: &str, split: &str, recs: &[Vec<Vec<u32>>]| -> RecordFile {
            let file = format!("{kind}/{split}.bin");
            let index = format!("{kind}/{split}.idx");
            let parts = if kind == "sft" { 2 } else { 3 };
            let mut w =
                RecordWriter::create(&dir.join(&file), &dir.join(&index), dtype, parts).unwrap();
            for r in recs {
                let refs: Vec<&[u32]> = r.iter().map(|p| p.as_slice()).collect();
                w.push(&refs).unwrap();
            }
            RecordFile {
                file,
                index,
                count: w.finish().unwrap(),
            }
        };
        let sft_train = count(
            "sft",
            "train",
            &[vec![vec![1, 2], vec![3]], vec![vec![4], vec![5, 6, 7]]],
        );
        let sft_held = count("sft", "heldout", &[]);
        let dpo_train = count("dpo", "train", &[vec![vec![1], vec![2, 3], vec![4, 5, 6]]]);
        let dpo_held = count("dpo", "heldout", &[vec![vec![9], vec![], vec![8]]]);
        let index = TokenIndex {
            format: FORMAT,
            dtype,
            vocab_size: 100,
            bos_id: 0,
            eos_id: 0,
            pad_id: 0,
            pretrain: PretrainIndex {
                shards: vec![
                    ShardFile {
                        shard: "shard-00000".into(),
                        file: "pretrain/shard-00000.bin".into(),
                        tokens: t0,
                    },
                    ShardFile {
                        shard: "shard-00001".into(),
                        file: "pretrain/shard-00001.bin".into(),
                        tokens: t1,
                    },
                ],
                validation: ArrayFile {
                    file: "pretrain/validation.bin".into(),
                    tokens: tv,
                },
            },
            sft: SplitFiles {
                train: sft_train,
                heldout: sft_held,
            },
            dpo: SplitFiles {
                train: dpo_train,
                heldout: dpo_held,
            },
        };
        write_index(dir, &index).unwrap();
        index
    }

    #[test]
    fn round_trips_arrays_and_records_in_both_dtypes() {
        for dtype in [Dtype::U16, Dtype::U32] {
            let tmp = tempfile::tempdir().unwrap();
            let written = write_fixture(tmp.path(), dtype);
            let t = Tokens::open(tmp.path()).unwrap();
            assert_eq!(t.index, written);
            let s0 = t.pretrain_shard("shard-00000").unwrap();
            assert_eq!(s0.len(), 7);
            assert_eq!(s0.window(0, 7), vec![5, 6, 7, 0, 8, 9, 0]);
            assert_eq!(s0.window(4, 2), vec![8, 9]);
            let s1 = t.pretrain_shard("shard-00001").unwrap();
            let big = if dtype == Dtype::U16 { 1 } else { 70_000 };
            assert_eq!(s1.window(0, 2), vec![big, 0]);
            assert_eq!(t.pretrain_validation().unwrap().window(0, 2), vec![3, 0]);

            let sft = t.sft(Split::Train).unwrap();
            assert_eq!(sft.len(), 2);
            assert_eq!(
                sft.get(1),
                SftSample {
                    prompt: vec![4],
                    response: vec![5, 6, 7]
                }
            );
            assert!(t.sft(Split::Heldout).unwrap().is_empty());
            let dpo = t.dpo(Split::Train).unwrap();
            assert_eq!(
                dpo.get(0),
                DpoPair {
                    prompt: vec![1],
                    chosen: vec![2, 3],
                    rejected: vec![4, 5, 6]
                }
            );
            let held = t.dpo(Split::Heldout).unwrap();
            assert_eq!(held.get(0).chosen, Vec::<i64>::new());
            assert_eq!(held.get(0).rejected, vec![8]);
        }
    }

    #[test]
    fn u16_writer_refuses_ids_that_do_not_fit() {
        let tmp = tempfile::tempdir().unwrap();
        let mut a = ArrayWriter::create(&tmp.path().join("a.bin"), Dtype::U16).unwrap();
        let err = a.push(&[70_000]).unwrap_err().to_string();
        assert!(err.contains("70000") && err.contains("a.bin"), "{err}");
        assert_eq!(Dtype::for_vocab(65_536), Dtype::U16);
        assert_eq!(Dtype::for_vocab(65_537), Dtype::U32);
    }

    #[test]
    fn unknown_shard_and_truncated_files_are_clear_errors() {
        let tmp = tempfile::tempdir().unwrap();
        write_fixture(tmp.path(), Dtype::U16);
        let t = Tokens::open(tmp.path()).unwrap();
        let err = t.pretrain_shard("shard_00000").unwrap_err().to_string();
        assert!(
            err.contains("shard_00000") && err.contains("shard-00000"),
            "{err}"
        );

        // Truncate a shard by one token: opening it must fail, not read garbage.
        let p = tmp.path().join("pretrain/shard-00000.bin");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 2]).unwrap();
        let err = t.pretrain_shard("shard-00000").unwrap_err().to_string();
        assert!(
            err.contains("holds 6 tokens") && err.contains("index says 7"),
            "{err}"
        );

        // A record index pointing past its data file is refused at open.
        let p = tmp.path().join("sft/train.bin");
        std::fs::write(&p, [0u8; 4]).unwrap();
        let err = t.sft(Split::Train).unwrap_err().to_string();
        assert!(err.contains("past the end"), "{err}");
    }

    #[test]
    fn missing_index_says_to_run_precompute() {
        let tmp = tempfile::tempdir().unwrap();
        let err = Tokens::open(tmp.path()).unwrap_err().to_string();
        assert!(
            err.contains("index.json") && err.contains("precompute"),
            "{err}"
        );
    }

    #[test]
    fn every_shard_of_every_chunk_is_used_at_every_scale() {
        for available in [1usize, 2, 3, 4, 5, 7, 16, 21, 43, 81, 432] {
            let all = names(available);
            for scale in [4u32, 21, 43, 81, 432, 1000] {
                let want = available.min(scale as usize);
                let mut union = Vec::new();
                for chunk in 1..=CHUNKS {
                    let got = select_shards(&all, chunk, scale);
                    assert!(!got.is_empty(), "chunk {chunk} of {available} at {scale}");
                    assert!(got.iter().all(|n| all.contains(n)));
                    union.extend(got);
                }
                union.sort();
                union.dedup();
                assert_eq!(
                    union,
                    all[..want].to_vec(),
                    "{available} shards at scale {scale}"
                );
                if want >= CHUNKS as usize {
                    let sizes: Vec<usize> = (1..=CHUNKS)
                        .map(|c| select_shards(&all, c, scale).len())
                        .collect();
                    assert_eq!(sizes.iter().sum::<usize>(), want, "chunks are disjoint");
                    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                    assert!(hi - lo <= 1, "balanced: {sizes:?}");
                }
            }
        }
        assert!(select_shards(&names(8), 0, 4).is_empty());
        assert!(select_shards(&names(8), 5, 4).is_empty());
    }

    #[test]
    fn tokens_select_shards_checks_the_chunk() {
        let tmp = tempfile::tempdir().unwrap();
        write_fixture(tmp.path(), Dtype::U16);
        let t = Tokens::open(tmp.path()).unwrap();
        assert!(
            t.select_shards(5, 4)
                .unwrap_err()
                .to_string()
                .contains("1..=4")
        );
        assert_eq!(
            t.select_shards(2, 4).unwrap(),
            vec!["shard-00001".to_string()]
        );
    }
}
