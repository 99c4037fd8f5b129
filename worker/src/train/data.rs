//! Batches for each stage, drawn in a seeded per-epoch order with a resumable cursor.

use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

use super::rng::epoch_order;
use crate::tokens::{DpoPair, DpoSet, SftSample, SftSet, TokenArray};

/// Label value that cross-entropy ignores (prompt and padding positions).
pub const IGNORE: i64 = -100;

/// Where a stage's data stream stands: the epoch and the position in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Cursor {
    pub epoch: u64,
    pub index: u64,
}

/// Walks `0..n` in the order of `(seed, stage, epoch)`, epoch after epoch.
pub struct Sampler {
    n: usize,
    seed: u64,
    stage: String,
    cursor: Cursor,
    order: Vec<u32>,
}

impl Sampler {
    pub fn new(n: usize, seed: u64, stage: &str, cursor: Cursor) -> Sampler {
        let order = epoch_order(n, seed, stage, cursor.epoch);
        Sampler {
            n,
            seed,
            stage: stage.to_string(),
            cursor,
            order,
        }
    }

    pub fn cursor(&self) -> Cursor {
        self.cursor
    }

    /// The next sample, and whether it was the last of its epoch.
    pub fn next_index(&mut self) -> (usize, bool) {
        let i = self.order[self.cursor.index as usize] as usize;
        self.cursor.index += 1;
        let ended = self.cursor.index as usize == self.n;
        if ended {
            self.cursor = Cursor {
                epoch: self.cursor.epoch + 1,
                index: 0,
            };
            self.order = epoch_order(self.n, self.seed, &self.stage, self.cursor.epoch);
        }
        (i, ended)
    }

    /// Passes over the next `n` samples as if they had been drawn (epochs wrap as
    /// they do when drawing).
    pub fn skip(&mut self, n: u64) {
        for _ in 0..n {
            self.next_index();
        }
    }

    /// Epochs done, fractional.
    pub fn epoch_progress(&self) -> f64 {
        self.cursor.epoch as f64 + self.cursor.index as f64 / self.n as f64
    }
}

/// A language-modelling batch: inputs `[B, T]` and labels `[B, T]`.
#[derive(Debug)]
pub struct LmBatch {
    pub input: Tensor,
    pub labels: Tensor,
}

/// Pretraining windows of `seq_len + 1` tokens, cut without overlap from each shard.
pub struct PretrainData {
    arrays: Vec<TokenArray>,
    windows: Vec<(u32, u64)>,
    seq_len: usize,
    /// Of `windows`, how many are mixed-in hard examples (the last ones).
    hard: usize,
}

impl PretrainData {
    pub fn new(arrays: Vec<TokenArray>, seq_len: usize) -> Result<PretrainData> {
        let mut windows = Vec::new();
        for (a, arr) in arrays.iter().enumerate() {
            windows.extend(
                lavender::tokens::pretrain_window_starts(arr.len(), seq_len)
                    .map(|start| (a as u32, start as u64)),
            );
        }
        ensure!(
            !windows.is_empty(),
            "the selected shards hold {} tokens, fewer than one training window of {} (training.seq_len + 1); use a smaller seq_len or more data",
            arrays.iter().map(TokenArray::len).sum::<usize>(),
            seq_len + 1
        );
        Ok(PretrainData {
            arrays,
            windows,
            seq_len,
            hard: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Adds every whole window of `seq_len + 1` tokens stored back to back in `array`
    /// (hard examples, already repeated by their upsampling factor); returns how many.
    pub fn add_windows(&mut self, array: TokenArray) -> usize {
        let span = self.seq_len + 1;
        let a = self.arrays.len() as u32;
        let n = array.len() / span;
        self.windows.extend((0..n).map(|k| (a, (k * span) as u64)));
        self.arrays.push(array);
        self.hard += n;
        n
    }

    /// How many windows are mixed-in hard examples.
    pub fn hard_windows(&self) -> usize {
        self.hard
    }

    pub fn window(&self, i: usize) -> Vec<i64> {
        let (a, start) = self.windows[i];
        self.arrays[a as usize].window(start as usize, self.seq_len + 1)
    }

    /// The window's array (shard position) and start token.
    pub fn location(&self, i: usize) -> (usize, u64) {
        let (a, s) = self.windows[i];
        (a as usize, s)
    }

    pub fn rows(&self, indices: &[usize]) -> Rows {
        Rows {
            tokens: indices.iter().map(|&i| self.window(i)).collect(),
            prompts: None,
        }
    }

    pub fn batch(&self, indices: &[usize], device: Device) -> LmBatch {
        lm_batch(&self.rows(indices), device)
    }
}

/// Evenly spaced windows of a held-out array (the same every evaluation).
pub fn validation_batches(
    array: &TokenArray,
    seq_len: usize,
    batch_size: usize,
    batches: usize,
    device: Device,
) -> Result<Vec<LmBatch>> {
    let span = seq_len + 1;
    let available = array.len() / span;
    ensure!(
        available > 0,
        "the validation split holds {} tokens, fewer than one window of {span}; rerun build_shards with a larger validation_fraction",
        array.len()
    );
    let want = (batch_size * batches).min(available);
    let stride = available / want;
    let rows: Vec<Vec<i64>> = (0..want)
        .map(|k| array.window(k * stride * span, span))
        .collect();
    Ok(rows
        .chunks(batch_size)
        .map(|c| {
            let rows = Rows {
                tokens: c.to_vec(),
                prompts: None,
            };
            lm_batch(&rows, device)
        })
        .collect())
}

/// A batch before it becomes tensors: rows of `len + 1` tokens, and for each row how
/// many of its first tokens are prompt (not trained on; none when `prompts` is None).
pub struct Rows {
    pub tokens: Vec<Vec<i64>>,
    pub prompts: Option<Vec<usize>>,
}

impl Rows {
    /// Rows and time steps of the batch's tensors: every row padded to the longest.
    pub fn shape(&self) -> (usize, usize) {
        let t = self.tokens.iter().map(|r| r.len() - 1).max().unwrap_or(1);
        (self.tokens.len(), t)
    }

    /// Writes inputs and next-token labels, row after row, right-padded with token 0
    /// and labelled [`IGNORE`] there and on prompt tokens, into the first `b × t`
    /// elements of `input` and `labels` (see [`Rows::shape`]).
    pub fn write(&self, input: &mut [i64], labels: &mut [i64]) {
        let (_, t) = self.shape();
        for (i, r) in self.tokens.iter().enumerate() {
            let n = r.len() - 1;
            let prompt = self.prompts.as_ref().map_or(0, |p| p[i]);
            let (inp, lab) = (
                &mut input[i * t..(i + 1) * t],
                &mut labels[i * t..(i + 1) * t],
            );
            for j in 0..t {
                if j < n {
                    inp[j] = r[j];
                    // Label j predicts token j + 1; prompt tokens are not trained on.
                    lab[j] = if j + 1 < prompt { IGNORE } else { r[j + 1] };
                } else {
                    inp[j] = 0;
                    lab[j] = IGNORE;
                }
            }
        }
    }
}

/// `rows` as new tensors on `device` (evaluation and scoring; training stages its
/// batches into reused buffers, see `staging`).
fn lm_batch(rows: &Rows, device: Device) -> LmBatch {
    let (b, t) = rows.shape();
    let mut input = vec![0i64; b * t];
    let mut labels = vec![0i64; b * t];
    rows.write(&mut input, &mut labels);
    let shape = [b as i64, t as i64];
    LmBatch {
        input: Tensor::from_slice(&input).view(shape).to_device(device),
        labels: Tensor::from_slice(&labels).view(shape).to_device(device),
    }
}

/// Prompt + response cut to `max_tokens`, keeping the prompt's end and the
/// response's start; returns the tokens and how many belong to the prompt.
pub fn fit(prompt: &[i64], response: &[i64], max_tokens: usize) -> (Vec<i64>, usize) {
    let keep_prompt = prompt.len().min(
        max_tokens
            .saturating_sub(response.len())
            .max(max_tokens / 2),
    );
    let mut seq: Vec<i64> = prompt[prompt.len() - keep_prompt..].to_vec();
    seq.extend_from_slice(response);
    seq.truncate(max_tokens);
    (seq, keep_prompt)
}

/// SFT: prompt + response, loss on response tokens only.
pub struct SftData {
    set: SftSet,
    seq_len: usize,
}

impl SftData {
    pub fn new(set: SftSet, seq_len: usize, what: &str) -> Result<SftData> {
        ensure!(
            !set.is_empty(),
            "the {what} SFT set is empty; rerun precompute with SFT data (data.sft_jsonl, or the corpus-derived default)"
        );
        Ok(SftData { set, seq_len })
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn rows(&self, indices: &[usize]) -> Rows {
        let mut tokens = Vec::new();
        let mut prompts = Vec::new();
        for &i in indices {
            let SftSample { prompt, response } = self.set.get(i);
            let (seq, p) = fit(&prompt, &response, self.seq_len + 1);
            tokens.push(seq);
            prompts.push(p);
        }
        Rows {
            tokens,
            prompts: Some(prompts),
        }
    }

    pub fn batch(&self, indices: &[usize], device: Device) -> LmBatch {
        lm_batch(&self.rows(indices), device)
    }
}

/// DPO: chosen and rejected continuations of one prompt, in one batch of 2·B rows
/// (chosen rows first).
pub struct DpoData {
    set: DpoSet,
    seq_len: usize,
}

impl DpoData {
    pub fn new(set: DpoSet, seq_len: usize, what: &str) -> Result<DpoData> {
        ensure!(
            !set.is_empty(),
            "the {what} DPO set is empty; rerun precompute with DPO data (data.dpo_jsonl, or the corpus-derived default)"
        );
        Ok(DpoData { set, seq_len })
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn batch(&self, indices: &[usize], device: Device) -> LmBatch {
        lm_batch(&self.rows(indices), device)
    }

    pub fn rows(&self, indices: &[usize]) -> Rows {
        let mut chosen = (Vec::new(), Vec::new());
        let mut rejected = (Vec::new(), Vec::new());
        for &i in indices {
            let DpoPair {
                prompt,
                chosen: c,
                rejected: r,
            } = self.set.get(i);
            for (resp, out) in [(c, &mut chosen), (r, &mut rejected)] {
                let (seq, p) = fit(&prompt, &resp, self.seq_len + 1);
                out.0.push(seq);
                out.1.push(p);
            }
        }
        let mut rows = chosen.0;
        rows.extend(rejected.0);
        let mut prompts = chosen.1;
        prompts.extend(rejected.1);
        // A response fully cut away still needs a row of two tokens to be a batch row.
        for r in &mut rows {
            while r.len() < 2 {
                r.push(0);
            }
        }
        Rows {
            tokens: rows,
            prompts: Some(prompts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_visits_every_sample_once_per_epoch_and_resumes() {
        let mut s = Sampler::new(5, 1, "pretrain", Cursor::default());
        let mut seen: Vec<usize> = (0..5).map(|_| s.next_index().0).collect();
        assert_eq!(s.cursor(), Cursor { epoch: 1, index: 0 });
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        // A sampler rebuilt from a mid-epoch cursor continues identically.
        let mut a = Sampler::new(5, 1, "pretrain", Cursor::default());
        a.next_index();
        a.next_index();
        let mut b = Sampler::new(5, 1, "pretrain", a.cursor());
        for _ in 0..7 {
            assert_eq!(a.next_index(), b.next_index());
        }
        // Skipping is drawing without using: across an epoch's end too.
        let mut c = Sampler::new(5, 1, "pretrain", a.cursor());
        c.skip(4);
        for _ in 0..4 {
            a.next_index();
        }
        assert_eq!(c.cursor(), a.cursor());
        assert_eq!(c.next_index(), a.next_index());
    }

    #[test]
    fn labels_skip_prompt_and_padding() {
        let rows = Rows {
            tokens: vec![vec![1, 2, 3, 4], vec![5, 6]],
            prompts: Some(vec![2, 1]),
        };
        let b = lm_batch(&rows, Device::Cpu);
        let labels: Vec<i64> = Vec::try_from(b.labels.view([-1])).unwrap();
        // Row 0: prompt [1, 2] → label of position 0 (predicts 2, a prompt token) ignored.
        assert_eq!(labels, vec![IGNORE, 3, 4, 6, IGNORE, IGNORE]);
        let input: Vec<i64> = Vec::try_from(b.input.view([-1])).unwrap();
        assert_eq!(input, vec![1, 2, 3, 5, 0, 0]);
    }

    #[test]
    fn fit_keeps_the_prompt_end_and_the_response_start() {
        assert_eq!(fit(&[1, 2, 3], &[4, 5], 10), (vec![1, 2, 3, 4, 5], 3));
        assert_eq!(
            fit(&[1, 2, 3, 4, 5, 6], &[7, 8], 5),
            (vec![4, 5, 6, 7, 8], 3)
        );
        let (seq, p) = fit(&[1; 20], &[2; 20], 8);
        assert_eq!(p, 4);
        assert_eq!(seq, vec![1, 1, 1, 1, 2, 2, 2, 2]);
    }
}
