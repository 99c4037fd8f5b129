//! Deterministic randomness for data order and dropout.
//!
//! Nothing random carries state from one step to the next: each epoch's data order
//! comes from `(seed, stage, epoch)` (`lavender::data_order`) and each micro-batch
//! reseeds libtorch from `(seed, step, micro)`. A checkpoint therefore needs only the
//! seed and the data cursor to replay a run bit for bit.

pub use lavender::data_order::{epoch_order, mix};

/// Reseeds libtorch's generators for one micro-batch (dropout).
pub fn seed_torch(seed: u64, step: u64, micro: u64) {
    tch::manual_seed((mix(&[seed, step, micro]) >> 1) as i64);
}
