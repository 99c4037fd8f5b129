//! The order in which a training stage draws its samples: each epoch's order is a
//! permutation of the samples from `(seed, stage, epoch)` alone, so a checkpoint
//! needs only the seed and a cursor to replay it, and anyone (a test placing data
//! where a given step will draw it, say) can compute which sample a step draws.

/// SplitMix64: small, fast, and good enough to shuffle data.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: bias is negligible for the sizes used here.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// A seed mixed from several parts (order matters).
pub fn mix(parts: &[u64]) -> u64 {
    let mut acc = 0x6A09_E667_F3BC_C908u64;
    for &p in parts {
        acc = SplitMix64::new(acc ^ p).next_u64();
    }
    acc
}

/// A stable number for a name (FNV-1a), to mix stage names into seeds.
pub fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// `0..n` in the order of `(seed, stage, epoch)`.
pub fn epoch_order(n: usize, seed: u64, stage: &str, epoch: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    SplitMix64::new(mix(&[seed, name_hash(stage), epoch])).shuffle(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_order_is_a_permutation_that_depends_on_every_part() {
        let a = epoch_order(100, 7, "pretrain", 0);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<u32>>());
        assert_eq!(a, epoch_order(100, 7, "pretrain", 0));
        assert_ne!(a, epoch_order(100, 7, "pretrain", 1));
        assert_ne!(a, epoch_order(100, 8, "pretrain", 0));
        assert_ne!(a, epoch_order(100, 7, "sft", 0));
    }
}
