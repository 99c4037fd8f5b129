//! The model's parameters: named like Hugging Face GPT-2, stored in one flat buffer.
//!
//! Every parameter is a view into a single contiguous `f32` tensor, ordered with the
//! weight-decayed matrices first. The optimizer then updates the whole model with a
//! handful of large kernels instead of a loop over ~12 tensors per layer, and weight
//! decay is a single `narrow(0, 0, decay_numel)`. Their gradients are views into one
//! flat buffer too, so clipping and the optimizer read them where backward wrote
//! them, with no copy.

use tch::{Device, Kind, Tensor};

/// One named parameter and where it lives in the flat buffer.
#[derive(Debug)]
pub struct Param {
    pub name: String,
    pub shape: Vec<i64>,
    pub offset: i64,
    pub numel: i64,
    /// Decoupled weight decay applies (2-D projection matrices; never biases,
    /// LayerNorm or embeddings).
    pub decay: bool,
    /// The leaf the model computes with (requires grad while training).
    pub tensor: Tensor,
}

/// A parameter to allocate: name, shape, decay, and its initial values.
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<i64>,
    pub decay: bool,
    pub init: Init,
}

#[derive(Debug, Clone, Copy)]
pub enum Init {
    Normal(f64),
    Zeros,
    Ones,
}

pub struct ParamSet {
    pub params: Vec<Param>,
    flat: Tensor,
    decay_numel: i64,
    /// Every parameter's gradient, a view each (from [`ParamSet::init_grads`]).
    grad: Option<Tensor>,
}

impl ParamSet {
    /// Allocates the flat buffer and initialises every parameter in spec order, so
    /// the same seed yields the same weights whatever the decay grouping.
    pub fn new(specs: Vec<ParamSpec>, device: Device) -> ParamSet {
        let mut order: Vec<usize> = (0..specs.len()).collect();
        // Stable: decayed first, each group in spec order.
        order.sort_by_key(|&i| !specs[i].decay);
        let mut offsets = vec![0i64; specs.len()];
        let mut total = 0i64;
        let mut decay_numel = 0i64;
        for &i in &order {
            offsets[i] = total;
            let n: i64 = specs[i].shape.iter().product();
            total += n;
            if specs[i].decay {
                decay_numel += n;
            }
        }
        let flat = Tensor::zeros([total], (Kind::Float, device));
        let mut params = Vec::with_capacity(specs.len());
        let _guard = tch::no_grad_guard();
        for (spec, offset) in specs.into_iter().zip(offsets) {
            let numel: i64 = spec.shape.iter().product();
            let mut view = flat.narrow(0, offset, numel).view(spec.shape.as_slice());
            match spec.init {
                Init::Normal(std) => {
                    let _ = view.normal_(0.0, std);
                }
                Init::Zeros => {
                    let _ = view.zero_();
                }
                Init::Ones => {
                    let _ = view.fill_(1.0);
                }
            }
            params.push(Param {
                name: spec.name,
                shape: spec.shape,
                offset,
                numel,
                decay: spec.decay,
                tensor: view.detach().set_requires_grad(true),
            });
        }
        params.sort_by_key(|p| p.offset);
        ParamSet {
            params,
            flat,
            decay_numel,
            grad: None,
        }
    }

    /// The flat buffer every parameter is a view of (not tracked by autograd).
    pub fn flat(&self) -> &Tensor {
        &self.flat
    }

    /// Number of leading elements of [`Self::flat`] that take weight decay.
    pub fn decay_numel(&self) -> i64 {
        self.decay_numel
    }

    pub fn numel(&self) -> i64 {
        self.flat.size()[0]
    }

    pub fn get(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The gradients as one flat tensor, in the order of [`Self::flat`]: the buffer
    /// backward accumulates into (shared, not a copy; zeros before the first backward).
    ///
    /// # Panics
    /// Before [`Self::init_grads`].
    pub fn flat_grad(&self) -> Tensor {
        self.grad
            .as_ref()
            .expect("init_grads gives the parameters their gradient buffer")
            .shallow_clone()
    }

    /// Gives every parameter a zero gradient that is a view of one flat buffer, so
    /// every backward accumulates there in place, a fresh and a resumed process alike
    /// (exact resume).
    pub fn init_grads(&mut self) -> anyhow::Result<()> {
        let grad = self.flat.zeros_like();
        for p in &mut self.params {
            let view = grad.narrow(0, p.offset, p.numel).view(p.shape.as_slice());
            crate::native::set_grad(&mut p.tensor, &view)?;
        }
        self.grad = Some(grad);
        Ok(())
    }

    pub fn zero_grad(&mut self) {
        if let Some(g) = &mut self.grad {
            let _ = g.zero_();
        }
    }

    /// A deep copy with its own flat buffer.
    pub fn deep_copy(&self, requires_grad: bool) -> ParamSet {
        let flat = self.flat.detach().copy();
        let params = self
            .params
            .iter()
            .map(|p| Param {
                name: p.name.clone(),
                shape: p.shape.clone(),
                offset: p.offset,
                numel: p.numel,
                decay: p.decay,
                tensor: flat
                    .narrow(0, p.offset, p.numel)
                    .view(p.shape.as_slice())
                    .detach()
                    .set_requires_grad(requires_grad),
            })
            .collect();
        ParamSet {
            params,
            flat,
            decay_numel: self.decay_numel,
            grad: None,
        }
    }
}
