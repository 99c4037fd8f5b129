//! Training batches written into buffers allocated once per stage, never a new
//! tensor per micro-batch.
//!
//! On the CPU the batch is the host buffer itself. On an accelerator the rows are
//! written into host memory (pinned on CUDA) and copied into a device buffer; on
//! CUDA that copy does not wait, so the host prepares the next micro-batch while the
//! device still runs the current one. Two pinned buffers take turns, each with an
//! event recorded after its copy, so the host never overwrites memory a copy still
//! reads. The one device buffer needs no such care: the copy into it is queued on
//! the same stream as the kernels that read the previous batch, so it runs after them.

use anyhow::{Result, ensure};
use tch::{Device, Kind, Tensor};

use super::data::{LmBatch, Rows};
use crate::native::{self, Event};

struct HostSlot {
    input: Tensor,
    labels: Tensor,
    /// Recorded after the copy out of this slot (CUDA): done before it is refilled.
    copied: Option<Event>,
}

pub struct BatchStager {
    /// Elements each buffer holds: the largest `rows × time steps` of the stage.
    capacity: usize,
    slots: Vec<HostSlot>,
    next: usize,
    /// The device's input and label buffers, off the CPU.
    on_device: Option<(Tensor, Tensor)>,
    non_blocking: bool,
}

impl BatchStager {
    /// Buffers for batches of at most `capacity` tokens on `device`.
    pub fn new(device: Device, capacity: usize) -> Result<BatchStager> {
        let n = capacity as i64;
        let host = || Tensor::zeros([n], (Kind::Int64, Device::Cpu));
        let cuda = matches!(device, Device::Cuda(_));
        let slots = (0..if cuda { 2 } else { 1 })
            .map(|_| -> Result<HostSlot> {
                let (input, labels) = if cuda {
                    (host().pin_memory(device), host().pin_memory(device))
                } else {
                    (host(), host())
                };
                Ok(HostSlot {
                    input,
                    labels,
                    copied: if cuda {
                        Some(Event::new(device)?)
                    } else {
                        None
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let on_device = (device != Device::Cpu).then(|| {
            let dev = || Tensor::zeros([n], (Kind::Int64, device));
            (dev(), dev())
        });
        Ok(BatchStager {
            capacity,
            slots,
            next: 0,
            on_device,
            non_blocking: cuda,
        })
    }

    /// `rows` as a batch on the device. The tensors returned are views of the
    /// stager's buffers: the next call overwrites them, so a batch must be done with
    /// (its backward run) before the next one is staged.
    pub fn stage(&mut self, rows: &Rows) -> Result<LmBatch> {
        let (b, t) = rows.shape();
        let n = b * t;
        ensure!(
            n <= self.capacity,
            "a batch of {b} rows x {t} tokens exceeds the {} tokens its buffer holds",
            self.capacity
        );
        let turn = self.next;
        self.next = (turn + 1) % self.slots.len();
        let slot = &mut self.slots[turn];
        if let Some(event) = &slot.copied {
            event.synchronize()?;
        }
        rows.write(
            host_slice(&mut slot.input, n),
            host_slice(&mut slot.labels, n),
        );
        let shape = [b as i64, t as i64];
        let view = |t: &Tensor| t.narrow(0, 0, n as i64).view(shape);
        let Some((input, labels)) = &self.on_device else {
            return Ok(LmBatch {
                input: view(&slot.input),
                labels: view(&slot.labels),
            });
        };
        for (dst, src) in [(input, &slot.input), (labels, &slot.labels)] {
            native::copy(
                &mut dst.narrow(0, 0, n as i64),
                &src.narrow(0, 0, n as i64),
                self.non_blocking,
            )?;
        }
        if let Some(event) = &mut slot.copied {
            event.record()?;
        }
        Ok(LmBatch {
            input: view(input),
            labels: view(labels),
        })
    }
}

/// The first `n` elements of a contiguous int64 host tensor, to write into.
fn host_slice(t: &mut Tensor, n: usize) -> &mut [i64] {
    assert!(
        t.kind() == Kind::Int64 && t.device() == Device::Cpu && t.is_contiguous() && t.numel() >= n,
        "a staging buffer is a contiguous int64 host tensor of at least {n} elements"
    );
    // SAFETY: checked above: `n` int64 elements of contiguous host memory that this
    // tensor owns; the `&mut` borrow of it keeps other writers out for the slice's
    // life, and the views handed out by `stage` are not read while it is written
    // (see `BatchStager::stage`).
    unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut i64, n) }
}

#[cfg(test)]
mod tests {
    use super::super::data::IGNORE;
    use super::*;

    fn rows(tokens: Vec<Vec<i64>>, prompts: Option<Vec<usize>>) -> Rows {
        Rows { tokens, prompts }
    }

    #[test]
    fn stages_batches_of_any_shape_into_the_same_buffers() {
        let mut stager = BatchStager::new(Device::Cpu, 8).unwrap();
        let a = stager
            .stage(&rows(vec![vec![1, 2, 3], vec![4, 5, 6]], None))
            .unwrap();
        assert_eq!(a.input.size(), [2, 2]);
        assert_eq!(
            Vec::<i64>::try_from(a.input.view([-1])).unwrap(),
            [1, 2, 4, 5]
        );
        assert_eq!(
            Vec::<i64>::try_from(a.labels.view([-1])).unwrap(),
            [2, 3, 5, 6]
        );
        let first = a.input.data_ptr();
        drop(a);
        // A prompt and padding: the same labels as a freshly built batch.
        let r = rows(vec![vec![1, 2, 3, 4], vec![5, 6]], Some(vec![2, 1]));
        let b = stager.stage(&r).unwrap();
        assert_eq!(
            b.input.data_ptr(),
            first,
            "the same buffer, not a new tensor"
        );
        assert_eq!(b.input.size(), [2, 3]);
        assert_eq!(
            Vec::<i64>::try_from(b.labels.view([-1])).unwrap(),
            [IGNORE, 3, 4, 6, IGNORE, IGNORE]
        );
        assert_eq!(
            Vec::<i64>::try_from(b.input.view([-1])).unwrap(),
            [1, 2, 3, 5, 0, 0]
        );
        let err = stager
            .stage(&rows(vec![vec![0; 6], vec![0; 6]], None))
            .unwrap_err();
        assert!(err.to_string().contains("exceeds the 8 tokens"), "{err}");
    }
}
