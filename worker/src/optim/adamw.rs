//! AdamW over the model's flat parameter buffer.
//!
//! tch's built-in optimizers hide their moments, and tch 0.26 binds neither
//! `_fused_adamw_` nor the `_foreach_*` kernels. Because every parameter is a view
//! into one flat buffer (see `model::params`), the update runs over cache-sized
//! slices of that buffer, eight kernels each, whatever the number of parameters —
//! the effect of a fused kernel. Slices suit a CPU's cache; on an accelerator,
//! where each kernel is a launch (≈ 3,800 a step in 1 MiB slices at GPT-2 small),
//! the whole buffer is one slice: eight launches a step. Measured on one CPU thread against the per-tensor
//! loop torch.optim.AdamW runs on CPU: 1.2× faster at 0.24 M parameters, 1.9× at
//! 3.7 M, 3.3× at 124 M (GPT-2 small). The moments are flat too and are saved by
//! parameter name.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, bail, ensure};
use tch::{Device, Kind, Tensor};

use crate::model::params::ParamSet;
use crate::model::tensor_file::{self, TensorFile};

pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
pub const EXP_AVG: &str = "exp_avg";
pub const EXP_AVG_SQ: &str = "exp_avg_sq";

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// Elements per slice of the flat buffers in one update on the CPU (1 MiB of f32).
const CHUNK: i64 = 1 << 18;

/// Elements per update on `device` for a buffer of `n`: cache-sized slices on the
/// CPU, the whole buffer elsewhere.
fn slice_len(device: Device, n: i64) -> i64 {
    match device {
        Device::Cpu => CHUNK,
        _ => n.max(1),
    }
}

struct Coefficients {
    lr: f64,
    decay: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    inv_sqrt_bc2: f64,
    bc1: f64,
}

/// AdamW on one slice: `p ← p·(1 − lr·wd)` on its first `decay_len` elements, then
/// `p ← p − lr/bc1 · m / (√(v/bc2) + eps)`.
fn update(
    p: &mut Tensor,
    g: &Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    decay_len: i64,
    k: &Coefficients,
) {
    if decay_len > 0 && k.decay != 1.0 {
        let _ = p.narrow(0, 0, decay_len).g_mul_scalar_(k.decay);
    }
    let _ = m.lerp_(g, 1.0 - k.beta1);
    let _ = v.lerp_(&g.square(), 1.0 - k.beta2);
    let mut denom = v.sqrt();
    let _ = denom.g_mul_scalar_(k.inv_sqrt_bc2);
    let _ = denom.g_add_scalar_(k.eps);
    // addcdiv_ adds m / denom; a negative, rescaled denominator makes it the step.
    let _ = denom.g_mul_scalar_(-k.bc1 / k.lr);
    let _ = p.addcdiv_(m, &denom);
}

pub struct AdamW {
    pub cfg: AdamWConfig,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    /// Optimizer steps taken (drives bias correction).
    pub step: u64,
}

impl AdamW {
    pub fn new(cfg: AdamWConfig, params: &ParamSet) -> AdamW {
        let flat = params.flat();
        AdamW {
            cfg,
            exp_avg: flat.zeros_like(),
            exp_avg_sq: flat.zeros_like(),
            step: 0,
        }
    }

    /// One update of every parameter from the flat gradient `grad` at learning rate `lr`.
    pub fn step(&mut self, params: &ParamSet, grad: &Tensor, lr: f64) {
        let flat = params.flat();
        let slice = slice_len(flat.device(), flat.size()[0]);
        self.step_in_slices(params, grad, lr, slice);
    }

    /// [`Self::step`] in slices of `slice` elements.
    fn step_in_slices(&mut self, params: &ParamSet, grad: &Tensor, lr: f64, slice: i64) {
        let _guard = tch::no_grad_guard();
        self.step += 1;
        let c = self.cfg;
        let k = Coefficients {
            lr,
            decay: 1.0 - lr * c.weight_decay,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            inv_sqrt_bc2: 1.0 / (1.0 - c.beta2.powi(self.step as i32)).sqrt(),
            bc1: 1.0 - c.beta1.powi(self.step as i32),
        };
        let flat = params.flat();
        let (n, decayed) = (flat.size()[0], params.decay_numel());
        // Cache-sized slices: a few whole-slice kernels each, temporaries stay small.
        let mut start = 0;
        while start < n {
            let len = slice.min(n - start);
            let part = |t: &Tensor| t.narrow(0, start, len);
            let decay_len = (decayed - start).clamp(0, len);
            update(
                &mut part(flat),
                &part(grad),
                &mut part(&self.exp_avg),
                &mut part(&self.exp_avg_sq),
                decay_len,
                &k,
            );
            start += len;
        }
    }

    /// The moments as a `.safetensors` image in host memory, filled into `image`
    /// (its buffer reused; written to [`OPTIMIZER_FILE`]): `<param>.exp_avg` /
    /// `<param>.exp_avg_sq`, with the step, betas, eps and weight decay in the metadata.
    pub fn snapshot(&self, params: &ParamSet, image: &mut tensor_file::FileImage) -> Result<()> {
        let views: Vec<(String, Tensor)> = params
            .params
            .iter()
            .flat_map(|p| {
                let view =
                    |flat: &Tensor| flat.narrow(0, p.offset, p.numel).view(p.shape.as_slice());
                [
                    (format!("{}.{EXP_AVG}", p.name), view(&self.exp_avg)),
                    (format!("{}.{EXP_AVG_SQ}", p.name), view(&self.exp_avg_sq)),
                ]
            })
            .collect();
        let refs: Vec<(String, &Tensor)> = views.iter().map(|(n, t)| (n.clone(), t)).collect();
        let c = self.cfg;
        let meta = BTreeMap::from([
            ("optimizer".to_string(), "adamw".to_string()),
            ("step".to_string(), self.step.to_string()),
            ("betas".to_string(), format!("[{}, {}]", c.beta1, c.beta2)),
            ("beta1".to_string(), c.beta1.to_string()),
            ("beta2".to_string(), c.beta2.to_string()),
            ("eps".to_string(), c.eps.to_string()),
            ("weight_decay".to_string(), c.weight_decay.to_string()),
        ]);
        image.fill(&refs, meta)
    }

    /// Restores moments and step saved from [`Self::snapshot`] for the same parameters.
    pub fn load(&mut self, params: &ParamSet, path: &Path) -> Result<()> {
        let file = TensorFile::read(path)?;
        let step = file.meta_f64("step", path)?;
        ensure!(
            step >= 0.0 && step.fract() == 0.0,
            "{}: metadata step = {step} is not a step count",
            path.display()
        );
        let _guard = tch::no_grad_guard();
        for p in &params.params {
            for (suffix, flat) in [
                (EXP_AVG, &mut self.exp_avg),
                (EXP_AVG_SQ, &mut self.exp_avg_sq),
            ] {
                let name = format!("{}.{suffix}", p.name);
                let Some(t) = file.tensors.get(&name) else {
                    bail!(
                        "{} has no {name}; it does not belong to this model",
                        path.display()
                    );
                };
                if t.size() != p.shape {
                    bail!(
                        "{}: {name} has shape {:?}, the parameter has {:?}",
                        path.display(),
                        t.size(),
                        p.shape
                    );
                }
                flat.narrow(0, p.offset, p.numel)
                    .copy_(&t.reshape([-1]).to_device(flat.device()));
            }
        }
        self.step = step as u64;
        Ok(())
    }
}

/// Scales `grad` in place so its global L2 norm is at most `max_norm` (≤ 0: off);
/// returns the norm before clipping, a scalar f64 tensor on the gradient's device.
/// The factor `min(1, max_norm / (norm + 1e-6))` is computed there too, so nothing
/// waits for the device (as `torch.nn.utils.clip_grad_norm_` does it).
pub fn clip_grad_norm(grad: &mut Tensor, max_norm: f64) -> Tensor {
    let _guard = tch::no_grad_guard();
    let norm = grad.norm().to_kind(Kind::Double);
    if max_norm > 0.0 {
        let coef = ((&norm + 1e-6).reciprocal() * max_norm).clamp_max(1.0);
        let _ = grad.g_mul_(&coef);
    }
    norm
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::params::{Init, ParamSpec};
    use tch::Device;

    fn two_params() -> ParamSet {
        let spec = |name: &str, decay| ParamSpec {
            name: name.into(),
            shape: vec![2, 2],
            decay,
            init: Init::Ones,
        };
        ParamSet::new(
            vec![spec("b.bias", false), spec("w.weight", true)],
            Device::Cpu,
        )
    }

    fn cfg() -> AdamWConfig {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
        }
    }

    /// The textbook scalar AdamW, in f64.
    fn reference(grads: &[f64], lr: f64, decay: bool) -> f64 {
        let c = cfg();
        let (mut p, mut m, mut v) = (1.0f64, 0.0, 0.0);
        for (i, g) in grads.iter().enumerate() {
            let t = (i + 1) as i32;
            if decay {
                p *= 1.0 - lr * c.weight_decay;
            }
            m = c.beta1 * m + (1.0 - c.beta1) * g;
            v = c.beta2 * v + (1.0 - c.beta2) * g * g;
            let mh = m / (1.0 - c.beta1.powi(t));
            let vh = v / (1.0 - c.beta2.powi(t));
            p -= lr * mh / (vh.sqrt() + c.eps);
        }
        p
    }

    #[test]
    fn matches_textbook_adamw_with_decay_only_on_weights() {
        let params = two_params();
        let mut opt = AdamW::new(cfg(), &params);
        let grads = [0.5, -0.2, 0.1];
        for g in grads {
            let grad = Tensor::full([8], g, (Kind::Float, Device::Cpu));
            opt.step(&params, &grad, 0.01);
        }
        let w = params.get("w.weight").unwrap().tensor.double_value(&[0, 0]);
        let b = params.get("b.bias").unwrap().tensor.double_value(&[1, 1]);
        assert!((w - reference(&grads, 0.01, true)).abs() < 1e-6, "{w}");
        assert!((b - reference(&grads, 0.01, false)).abs() < 1e-6, "{b}");
        assert!(w < b, "weight decay shrank only the weight");
        assert_eq!(opt.step, 3);
    }

    #[test]
    fn slices_cover_the_buffer_and_the_decay_boundary() {
        // Both parameters straddle slice boundaries; decay ends inside a slice.
        let spec = |name: &str, n: i64, decay| ParamSpec {
            name: name.into(),
            shape: vec![n],
            decay,
            init: Init::Ones,
        };
        let n = CHUNK + CHUNK / 2 + 7;
        let params = ParamSet::new(
            vec![spec("w.weight", n, true), spec("b.bias", n, false)],
            Device::Cpu,
        );
        let mut opt = AdamW::new(cfg(), &params);
        let grads = [0.3, -0.1];
        for g in grads {
            opt.step(
                &params,
                &Tensor::full([2 * n], g, (Kind::Float, Device::Cpu)),
                0.01,
            );
        }
        let (w, b) = (
            reference(&grads, 0.01, true),
            reference(&grads, 0.01, false),
        );
        let expect_w = Tensor::full([n], w, (Kind::Float, Device::Cpu));
        let expect_b = Tensor::full([n], b, (Kind::Float, Device::Cpu));
        let got_w = &params.get("w.weight").unwrap().tensor;
        let got_b = &params.get("b.bias").unwrap().tensor;
        assert!((got_w - expect_w).abs().max().double_value(&[]) < 1e-6);
        assert!((got_b - expect_b).abs().max().double_value(&[]) < 1e-6);
    }

    #[test]
    fn the_whole_buffer_at_once_is_bit_identical_to_slices() {
        // The accelerators' path (one slice) against the CPU's, on the CPU.
        let spec = |name: &str, n: i64, decay| ParamSpec {
            name: name.into(),
            shape: vec![n],
            decay,
            init: Init::Ones,
        };
        let n = 2 * CHUNK + 12_345;
        let make = || {
            let params = ParamSet::new(
                vec![spec("w.weight", n, true), spec("b.bias", n, false)],
                Device::Cpu,
            );
            tch::manual_seed(7);
            let _guard = tch::no_grad_guard();
            params
                .flat()
                .narrow(0, 0, 2 * n)
                .copy_(&Tensor::randn([2 * n], (Kind::Float, Device::Cpu)));
            params
        };
        let (sliced, whole) = (make(), make());
        assert!(sliced.flat().equal(whole.flat()));
        let (mut a, mut b) = (AdamW::new(cfg(), &sliced), AdamW::new(cfg(), &whole));
        assert_eq!(slice_len(Device::Cpu, 2 * n), CHUNK);
        assert_eq!(slice_len(Device::Cuda(0), 2 * n), 2 * n);
        for (i, lr) in [0.01, 0.005, 0.002].into_iter().enumerate() {
            tch::manual_seed(100 + i as i64);
            let grad = Tensor::randn([2 * n], (Kind::Float, Device::Cpu));
            a.step_in_slices(&sliced, &grad, lr, CHUNK);
            b.step_in_slices(&whole, &grad, lr, 2 * n);
        }
        assert!(sliced.flat().equal(whole.flat()), "parameters differ");
        assert!(a.exp_avg.equal(&b.exp_avg), "exp_avg differs");
        assert!(a.exp_avg_sq.equal(&b.exp_avg_sq), "exp_avg_sq differs");
        assert!(!sliced.flat().equal(make().flat()), "the steps moved them");
    }

    #[test]
    fn state_round_trips_by_parameter_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(OPTIMIZER_FILE);
        let params = two_params();
        let mut opt = AdamW::new(cfg(), &params);
        let grad = Tensor::arange(8, (Kind::Float, Device::Cpu));
        opt.step(&params, &grad, 0.01);
        opt.step(&params, &grad, 0.01);
        let mut image = tensor_file::FileImage::default();
        opt.snapshot(&params, &mut image).unwrap();
        image.write(&path).unwrap();

        let file = TensorFile::read(&path).unwrap();
        assert!(file.tensors.contains_key("w.weight.exp_avg"));
        assert!(file.tensors.contains_key("b.bias.exp_avg_sq"));
        assert_eq!(file.metadata["step"], "2");
        assert_eq!(file.metadata["betas"], "[0.9, 0.95]");
        assert_eq!(file.metadata["eps"], "0.00000001");
        assert_eq!(file.metadata["weight_decay"], "0.1");

        let mut back = AdamW::new(cfg(), &params);
        back.load(&params, &path).unwrap();
        assert_eq!(back.step, 2);
        assert!(back.exp_avg.equal(&opt.exp_avg));
        assert!(back.exp_avg_sq.equal(&opt.exp_avg_sq));
    }

    #[test]
    fn clipping_bounds_the_global_norm() {
        let mut g = Tensor::from_slice(&[3.0f32, 4.0]);
        let norm = clip_grad_norm(&mut g, 1.0);
        assert_eq!(norm.kind(), Kind::Double);
        assert!((norm.double_value(&[]) - 5.0).abs() < 1e-6);
        assert!((g.norm().double_value(&[]) - 1.0).abs() < 1e-5);
        let mut small = Tensor::from_slice(&[0.3f32, 0.4]);
        let before = small.copy();
        let _ = clip_grad_norm(&mut small, 1.0);
        assert!(small.equal(&before), "below the limit: untouched");
        let mut off = Tensor::from_slice(&[30.0f32, 40.0]);
        let _ = clip_grad_norm(&mut off, 0.0);
        assert_eq!(off.double_value(&[1]), 40.0, "max_norm 0: no clipping");
    }
}
