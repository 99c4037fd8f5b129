//! What a save holds while it is in flight: the host buffers its copy goes into
//! (reused from one save to the next) and the save whose writer thread is still
//! writing. The Trainer's saves themselves are `save.rs`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::model::tensor_file::FileImage;
use crate::train::settings::StageKind;

/// Host memory for a checkpoint's files, reused from one save to the next: its
/// pages are faulted in by the first save, later ones only copy into it.
#[derive(Default)]
pub struct SaveBuffers {
    pub(super) weights: FileImage,
    pub(super) moments: FileImage,
    pub(super) ema: FileImage,
}

impl SaveBuffers {
    /// Buffers for checkpoints of `params` parameters (`with_moments`: and their
    /// two optimizer moments), their pages faulted in on a background thread while
    /// training starts, so that not even the first save stalls training for that.
    pub fn prepare(params: i64, with_moments: bool, with_ema: bool) -> NextBuffers {
        let bytes = usize::try_from(params).unwrap_or(0) * std::mem::size_of::<f32>();
        let thread = std::thread::Builder::new()
            .name("checkpoint-buffers".into())
            .spawn(move || SaveBuffers {
                weights: FileImage::with_pages_for(bytes),
                moments: if with_moments {
                    FileImage::with_pages_for(2 * bytes)
                } else {
                    FileImage::default()
                },
                ema: if with_ema {
                    FileImage::with_pages_for(bytes)
                } else {
                    FileImage::default()
                },
            });
        thread.map_or(NextBuffers::Absent, NextBuffers::Preparing)
    }
}

/// Host memory for the next save's copy.
pub enum NextBuffers {
    /// Being faulted in since training started (see [`SaveBuffers::prepare`]).
    Preparing(std::thread::JoinHandle<SaveBuffers>),
    /// Back from the previous save's writer.
    Ready(SaveBuffers),
    /// None at hand (lent to the writer, or preparing could not start): a save
    /// that finds none allocates its own.
    Absent,
}

impl NextBuffers {
    pub(super) fn take(&mut self) -> SaveBuffers {
        match std::mem::replace(self, NextBuffers::Absent) {
            NextBuffers::Preparing(thread) => thread.join().unwrap_or_default(),
            NextBuffers::Ready(buffers) => buffers,
            NextBuffers::Absent => SaveBuffers::default(),
        }
    }
}

/// What the writer thread hands back: the committed checkpoint, what retention
/// dropped after it, the buffers for the next save, how long it took to write the
/// files (into the page cache, their writeback started) and when it was durable.
pub(super) struct Written {
    pub(super) path: PathBuf,
    pub(super) dropped: Vec<PathBuf>,
    pub(super) buffers: SaveBuffers,
    pub(super) write: Duration,
    pub(super) durable_at: Instant,
}

/// A save whose files are written, fsynced and committed on a background thread
/// while training goes on. At most one exists: [`Trainer::save`](super::Trainer::save) waits for it before
/// it starts another, so two writers never race on the run directory (counters,
/// retention) and host memory holds one copy of the state, not one per save.
pub struct PendingSave {
    pub(super) writer: std::thread::JoinHandle<Result<Written>>,
    pub(super) name: String,
    pub(super) stage: String,
    pub(super) kind: Option<StageKind>,
    pub(super) step: u64,
    pub(super) loss: Option<f64>,
    /// The EMA weights' validation loss at this step (`training.ema`).
    pub(super) ema_eval_loss: Option<f64>,
    pub(super) epoch: f64,
    pub(super) epochs: Option<u32>,
    pub(super) remaining_hours: Option<f64>,
    /// When the save began (its `SAVE` line in train.log).
    pub(super) at: chrono::DateTime<chrono::Utc>,
    /// When the copy to host memory began: the save's own clock.
    pub(super) began: Instant,
    /// How long training stood still for it: the whole of [`Trainer::save`](super::Trainer::save), of
    /// which `waited` went on the previous save and `copy` on the copy.
    pub(super) stall: Duration,
    pub(super) waited: Duration,
    pub(super) copy: Duration,
}

impl PendingSave {
    /// The writer is done (committed, or failed); joining it will not block.
    pub fn is_done(&self) -> bool {
        self.writer.is_finished()
    }
}
