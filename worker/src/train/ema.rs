//! `training.ema`: an exponential moving average of the weights, kept on the device
//! beside them, `ema ← decay·ema + (1 − decay)·weights` every `every` optimizer steps
//! of a stage. Each stage starts it again from the weights it begins with (the
//! stages optimize different losses). Each checkpoint carries it as
//! `ema.safetensors` (the weights' names and layout, so `lavenderd export --ema`
//! hands it out as a model), and a resume continues it exactly.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use lavender::config::EmaConfig;

use crate::model::{self, Gpt, tensor_file::FileImage};

pub use lavender_export::EMA_FILE;

pub struct Ema {
    cfg: EmaConfig,
    /// A frozen copy of the model whose weights are the average.
    model: Gpt,
}

impl Ema {
    /// An average that starts at `model`'s weights.
    pub fn new(cfg: EmaConfig, model: &Gpt) -> Ema {
        Ema {
            cfg,
            model: model.frozen_copy(),
        }
    }

    /// The model with the averaged weights (to evaluate).
    pub fn model(&self) -> &Gpt {
        &self.model
    }

    /// Starts the average again at `model`'s weights.
    pub fn reset(&mut self, model: &Gpt) {
        let _guard = tch::no_grad_guard();
        self.model
            .params
            .flat()
            .shallow_clone()
            .copy_(model.params.flat());
    }

    /// Folds `model`'s weights in after stage step `stage_step`, if it is an update step.
    pub fn after_step(&mut self, model: &Gpt, stage_step: u64) {
        if stage_step.is_multiple_of(self.cfg.every) {
            let _guard = tch::no_grad_guard();
            let _ = self
                .model
                .params
                .flat()
                .shallow_clone()
                .lerp_(model.params.flat(), 1.0 - self.cfg.decay);
        }
    }

    /// The average as a `.safetensors` image (see [`model::snapshot_weights`]).
    pub fn snapshot(&self, image: &mut FileImage) -> Result<()> {
        model::snapshot_weights(&self.model, image)
    }

    /// Restores the average saved by [`Ema::snapshot`] in a checkpoint.
    pub fn load(&mut self, path: &Path) -> Result<BTreeMap<String, String>> {
        model::load_weights(&mut self.model, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GptConfig;
    use tch::Device;

    fn tiny() -> Gpt {
        Gpt::new(
            GptConfig {
                vocab_size: 10,
                n_positions: 4,
                n_embd: 4,
                n_layer: 1,
                n_head: 1,
                dropout: 0.0,
                layer_norm_epsilon: 1e-5,
            },
            Device::Cpu,
        )
        .unwrap()
    }

    #[test]
    fn averages_every_nth_step_and_restarts_from_the_weights() {
        tch::manual_seed(0);
        let model = tiny();
        let mut ema = Ema::new(
            EmaConfig {
                decay: 0.75,
                every: 2,
            },
            &model,
        );
        let start = model.params.flat().copy();
        // The weights move by +1 everywhere.
        let _ = model.params.flat().shallow_clone().g_add_scalar_(1.0);
        ema.after_step(&model, 1);
        assert!(
            ema.model().params.flat().equal(&start),
            "not an update step"
        );
        ema.after_step(&model, 2);
        let diff = (ema.model().params.flat() - &start).abs();
        let (lo, hi) = (diff.min().double_value(&[]), diff.max().double_value(&[]));
        assert!(
            (lo - 0.25).abs() < 1e-6 && (hi - 0.25).abs() < 1e-6,
            "{lo} {hi}"
        );
        ema.reset(&model);
        assert!(ema.model().params.flat().equal(model.params.flat()));
    }
}
