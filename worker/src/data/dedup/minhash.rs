//! Near-duplicate detection with MinHash and banded locality-sensitive hashing.
//!
//! Each document becomes a set of word 3-grams; `bands × rows` MinHash values summarise
//! it, and each band of `rows` values hashes to one 64-bit key. A document is a near
//! duplicate when one of its band keys was seen before. Only the band keys are kept
//! (`bands` × 8 bytes per document), never text, so memory stays bounded by the number
//! of documents. The probability that two documents of Jaccard similarity `s` collide is
//! `1 - (1 - s^rows)^bands`, which rises steeply around the configured threshold.

use std::collections::HashSet;

const BANDS: usize = 4;
/// Documents with fewer word 3-grams than this are left to exact deduplication: a few
/// shingles give MinHash too little to tell a near copy from a short common phrase.
pub const MIN_SHINGLES: usize = 8;

pub struct NearDuplicates {
    rows: usize,
    /// Multipliers (odd, so each is a bijection of u64) and offsets of the hash family.
    coeffs: Vec<(u64, u64)>,
    seen: Vec<HashSet<u64>>,
}

impl NearDuplicates {
    /// `threshold` in (0, 1): the Jaccard similarity at which a pair is caught about
    /// half the time (rows are chosen so that `(1/bands)^(1/rows)` is near it).
    pub fn new(threshold: f64) -> NearDuplicates {
        let rows = ((1.0 / BANDS as f64).ln() / threshold.clamp(0.01, 0.99).ln())
            .round()
            .clamp(1.0, 32.0) as usize;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            // splitmix64: a fixed, well-mixed sequence, so runs are reproducible.
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let coeffs = (0..BANDS * rows).map(|_| (next() | 1, next())).collect();
        NearDuplicates {
            rows,
            coeffs,
            seen: vec![HashSet::new(); BANDS],
        }
    }

    /// True when `text` is a near duplicate of a document given before; otherwise it is
    /// remembered. Short documents are never near duplicates (see [`MIN_SHINGLES`]).
    pub fn check_and_insert(&mut self, text: &str) -> bool {
        let shingles = shingles(text);
        if shingles.len() < MIN_SHINGLES {
            return false;
        }
        let mut mins = vec![u64::MAX; self.coeffs.len()];
        for s in &shingles {
            for (m, (a, b)) in mins.iter_mut().zip(&self.coeffs) {
                *m = (*m).min(a.wrapping_mul(*s).wrapping_add(*b));
            }
        }
        let keys: Vec<u64> = mins
            .chunks(self.rows)
            .map(|band| {
                band.iter()
                    .fold(0xCBF2_9CE4_8422_2325, |h, v| fnv(h, &v.to_le_bytes()))
            })
            .collect();
        if keys
            .iter()
            .zip(&self.seen)
            .any(|(k, seen)| seen.contains(k))
        {
            return true;
        }
        for (k, seen) in keys.into_iter().zip(&mut self.seen) {
            seen.insert(k);
        }
        false
    }
}

/// Hashes of the document's word 3-grams (distinct).
fn shingles(text: &str) -> HashSet<u64> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(3)
        .map(|w| {
            w.iter().fold(0xCBF2_9CE4_8422_2325, |h, word| {
                fnv(fnv(h, word.as_bytes()), b" ")
            })
        })
        .collect()
}

/// FNV-1a, 64 bits.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01B3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `words` pseudo-random words from a vocabulary of 5,000.
    fn text(words: u64, seed: u64) -> String {
        (0..words)
            .map(|i| {
                format!(
                    "w{}",
                    fnv(0xCBF2_9CE4_8422_2325, &(seed << 32 | i).to_le_bytes()) % 5000
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn near_copies_are_caught_and_different_documents_are_not() {
        let mut nd = NearDuplicates::new(0.8);
        assert_eq!(nd.rows, 6);
        let original = text(200, 1);
        assert!(!nd.check_and_insert(&original));
        // One word in 200 changed: Jaccard ≈ 0.97.
        let near = original.replacen("w", "x", 1);
        assert!(nd.check_and_insert(&near));
        // Unrelated documents pass.
        let mut caught = 0;
        for seed in 2..200 {
            caught += nd.check_and_insert(&text(200, seed)) as usize;
        }
        assert_eq!(caught, 0);
    }

    #[test]
    fn short_documents_are_left_to_exact_dedup() {
        let mut nd = NearDuplicates::new(0.8);
        assert!(!nd.check_and_insert("All:\nSpeak, speak."));
        assert!(!nd.check_and_insert("All:\nSpeak, speak."));
    }
}
