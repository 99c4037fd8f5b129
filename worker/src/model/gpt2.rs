//! A GPT-2 decoder whose parameters carry Hugging Face's names and layouts, so a
//! saved `model.safetensors` loads into `GPT2LMHeadModel` without conversion.
//!
//! Conv1D layout: projection weights are `[in, out]` and applied as `x @ W + b`.
//! The LM head is tied to `transformer.wte.weight` and therefore not a parameter.

use tch::{Device, Kind, Tensor};

use super::params::{Init, ParamSet, ParamSpec};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GptConfig {
    pub vocab_size: i64,
    pub n_positions: i64,
    pub n_embd: i64,
    pub n_layer: i64,
    pub n_head: i64,
    pub dropout: f64,
    pub layer_norm_epsilon: f64,
}

impl GptConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.n_embd > 0 && self.n_head > 0 && self.n_embd % self.n_head == 0,
            "model.n_embd ({}) must be a positive multiple of model.n_head ({})",
            self.n_embd,
            self.n_head
        );
        anyhow::ensure!(
            self.n_layer > 0,
            "model.n_layer must be at least 1, got {}",
            self.n_layer
        );
        anyhow::ensure!(
            self.n_positions > 0 && self.vocab_size > 0,
            "model.n_positions ({}) and the vocabulary size ({}) must be positive",
            self.n_positions,
            self.vocab_size
        );
        anyhow::ensure!(
            (0.0..1.0).contains(&self.dropout),
            "model.dropout must be in [0, 1), got {}",
            self.dropout
        );
        Ok(())
    }

    /// Every parameter, in Hugging Face's order, with GPT-2's initialisation
    /// (N(0, 0.02); residual projections scaled by 1/sqrt(2·n_layer)).
    fn specs(&self) -> Vec<ParamSpec> {
        let e = self.n_embd;
        let std = 0.02;
        let proj_std = 0.02 / (2.0 * self.n_layer as f64).sqrt();
        let mut v = Vec::new();
        let mut push = |name: String, shape: Vec<i64>, decay: bool, init: Init| {
            v.push(ParamSpec {
                name,
                shape,
                decay,
                init,
            })
        };
        push(
            "transformer.wte.weight".into(),
            vec![self.vocab_size, e],
            false,
            Init::Normal(std),
        );
        push(
            "transformer.wpe.weight".into(),
            vec![self.n_positions, e],
            false,
            Init::Normal(std),
        );
        for i in 0..self.n_layer {
            let p = |s: &str| format!("transformer.h.{i}.{s}");
            push(p("ln_1.weight"), vec![e], false, Init::Ones);
            push(p("ln_1.bias"), vec![e], false, Init::Zeros);
            push(
                p("attn.c_attn.weight"),
                vec![e, 3 * e],
                true,
                Init::Normal(std),
            );
            push(p("attn.c_attn.bias"), vec![3 * e], false, Init::Zeros);
            push(
                p("attn.c_proj.weight"),
                vec![e, e],
                true,
                Init::Normal(proj_std),
            );
            push(p("attn.c_proj.bias"), vec![e], false, Init::Zeros);
            push(p("ln_2.weight"), vec![e], false, Init::Ones);
            push(p("ln_2.bias"), vec![e], false, Init::Zeros);
            push(
                p("mlp.c_fc.weight"),
                vec![e, 4 * e],
                true,
                Init::Normal(std),
            );
            push(p("mlp.c_fc.bias"), vec![4 * e], false, Init::Zeros);
            push(
                p("mlp.c_proj.weight"),
                vec![4 * e, e],
                true,
                Init::Normal(proj_std),
            );
            push(p("mlp.c_proj.bias"), vec![e], false, Init::Zeros);
        }
        push("transformer.ln_f.weight".into(), vec![e], false, Init::Ones);
        push("transformer.ln_f.bias".into(), vec![e], false, Init::Zeros);
        v
    }
}

struct Block {
    ln_1: (Tensor, Tensor),
    c_attn: (Tensor, Tensor),
    attn_proj: (Tensor, Tensor),
    ln_2: (Tensor, Tensor),
    c_fc: (Tensor, Tensor),
    mlp_proj: (Tensor, Tensor),
}

pub struct Gpt {
    pub cfg: GptConfig,
    pub params: ParamSet,
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    ln_f: (Tensor, Tensor),
}

impl Gpt {
    /// A freshly initialised model; `tch::manual_seed` beforehand fixes its weights.
    pub fn new(cfg: GptConfig, device: Device) -> anyhow::Result<Gpt> {
        cfg.validate()?;
        let params = ParamSet::new(cfg.specs(), device);
        Ok(Gpt::from_params(cfg, params))
    }

    /// A frozen deep copy (the DPO reference model).
    pub fn frozen_copy(&self) -> Gpt {
        Gpt::from_params(self.cfg.clone(), self.params.deep_copy(false))
    }

    fn from_params(cfg: GptConfig, params: ParamSet) -> Gpt {
        let t = |name: &str| {
            params
                .get(name)
                .unwrap_or_else(|| panic!("parameter {name} is created by GptConfig::specs"))
                .tensor
                .shallow_clone()
        };
        let pair = |prefix: &str| (t(&format!("{prefix}.weight")), t(&format!("{prefix}.bias")));
        let blocks = (0..cfg.n_layer)
            .map(|i| {
                let p = |s: &str| format!("transformer.h.{i}.{s}");
                Block {
                    ln_1: pair(&p("ln_1")),
                    c_attn: pair(&p("attn.c_attn")),
                    attn_proj: pair(&p("attn.c_proj")),
                    ln_2: pair(&p("ln_2")),
                    c_fc: pair(&p("mlp.c_fc")),
                    mlp_proj: pair(&p("mlp.c_proj")),
                }
            })
            .collect();
        Gpt {
            wte: t("transformer.wte.weight"),
            wpe: t("transformer.wpe.weight"),
            ln_f: pair("transformer.ln_f"),
            blocks,
            cfg,
            params,
        }
    }

    /// Final hidden states `[B, T, n_embd]` for token ids `[B, T]`.
    // `x += …` would be tch's in-place add, which autograd rejects: layer_norm saved `x`.
    #[allow(clippy::assign_op_pattern)]
    pub fn hidden(&self, idx: &Tensor, train: bool) -> Tensor {
        let (b, t) = idx.size2().expect("token ids are [batch, time]");
        assert!(
            t <= self.cfg.n_positions,
            "sequence of {t} tokens exceeds model.n_positions = {}",
            self.cfg.n_positions
        );
        let e = self.cfg.n_embd;
        let nh = self.cfg.n_head;
        let hd = e / nh;
        let p = self.cfg.dropout;
        let eps = self.cfg.layer_norm_epsilon;
        let pos = Tensor::arange(t, (Kind::Int64, idx.device()));
        let mut x = Tensor::embedding(&self.wte, idx, -1, false, false)
            + Tensor::embedding(&self.wpe, &pos, -1, false, false);
        x = x.dropout(p, train);
        for blk in &self.blocks {
            let h = x.layer_norm([e], Some(&blk.ln_1.0), Some(&blk.ln_1.1), eps, false);
            let qkv = linear(&h, &blk.c_attn);
            let heads = |z: Tensor| z.view([b, t, nh, hd]).transpose(1, 2);
            let mut parts = qkv.split(e, 2).into_iter();
            let (q, k, v) = (
                heads(parts.next().unwrap()),
                heads(parts.next().unwrap()),
                heads(parts.next().unwrap()),
            );
            let attn_p = if train { p } else { 0.0 };
            let y = Tensor::scaled_dot_product_attention::<Tensor>(
                &q, &k, &v, None, attn_p, true, None, false,
            );
            let y = y.transpose(1, 2).contiguous().view([b, t, e]);
            x = x + linear(&y, &blk.attn_proj).dropout(p, train);
            let h = x.layer_norm([e], Some(&blk.ln_2.0), Some(&blk.ln_2.1), eps, false);
            let h = linear(&h, &blk.c_fc).gelu("tanh");
            x = x + linear(&h, &blk.mlp_proj).dropout(p, train);
        }
        x.layer_norm([e], Some(&self.ln_f.0), Some(&self.ln_f.1), eps, false)
    }

    /// Logits `[B, T, vocab]`; the head is `wte` transposed (tied weights).
    pub fn forward(&self, idx: &Tensor, train: bool) -> Tensor {
        self.hidden(idx, train).matmul(&self.wte.tr())
    }

    /// Trains on next-token cross-entropy: runs the model on `idx`, accumulates into
    /// every parameter's gradient `scale` × the gradient of the mean cross-entropy of
    /// `targets` (positions equal to `ignore` left out), and returns that mean as a
    /// scalar f64 tensor on the model's device, not read back (NaN when every
    /// position is ignored: nothing is accumulated then).
    ///
    /// The same value and gradient as `cross_entropy(&self.forward(idx, true), …)`
    /// followed by `backward`, computed with fewer passes over the `[tokens, vocab]`
    /// logits, the largest tensor of a step: the softmax is computed in place, and
    /// its gradient, `softmax − one_hot(target)`, is made from it in place too, where
    /// autograd writes a log-softmax, a zero-filled one-hot gradient and a third
    /// tensor for the backward of log-softmax. The head's two backward matrix
    /// products are then run directly, and autograd carries the hidden states'
    /// gradient through the rest of the model.
    ///
    /// Under autocast the head's three matrix products run in the reduced precision
    /// and the softmax in fp32 (the logits are widened first), as autocast computes
    /// `cross_entropy` of reduced-precision logits.
    pub fn train_next_token(
        &self,
        idx: &Tensor,
        targets: &Tensor,
        ignore: i64,
        scale: f64,
    ) -> Tensor {
        let hidden = self.hidden(idx, true);
        let e = self.cfg.n_embd;
        let (grad_hidden, grad_wte, loss) = {
            let _guard = tch::no_grad_guard();
            let h = hidden.detach().reshape([-1, e]);
            let y = targets.reshape([-1, 1]);
            let valid = y.ne(ignore);
            let weight = valid.to_kind(Kind::Float);
            // Kept on the device: the count of labelled positions divides there.
            let counted = weight.sum(Kind::Double);
            let y = y.where_scalarother(&valid, 0);
            // probs: logits − row max, their exp, then ÷ row sum (the softmax), in
            // fp32 even when autocast made the logits in a reduced precision.
            let logits = h.matmul(&self.wte.tr());
            let reduced = logits.kind();
            let mut probs = if reduced == Kind::Float {
                logits
            } else {
                logits.to_kind(Kind::Float)
            };
            let _ = probs.g_sub_(&probs.amax([1], true));
            let target_logit = probs.gather(1, &y, false);
            let _ = probs.exp_();
            let sums = probs.sum_dim_intlist(1, true, Kind::Float);
            let _ = probs.g_div_(&sums);
            // 0 / 0 = NaN when nothing is labelled, as the mean over no positions is.
            let loss = ((sums.log() - target_logit) * &weight).sum(Kind::Double) / &counted;
            // d(mean loss)/d(logits) = (softmax − one_hot) / counted, on counted rows;
            // all zero when nothing is labelled.
            let _ = probs.scatter_add_(1, &y, &weight.neg());
            let per_row = weight * (counted.clamp_min(1.0).reciprocal() * scale);
            // In the precision the head's products run in, converted once for both
            // (autocast would convert it, and `h`, for each).
            let (grad_logits, h) = if reduced == Kind::Float {
                let _ = probs.g_mul_(&per_row);
                (probs, h)
            } else {
                let out = Tensor::empty(probs.size(), (reduced, probs.device()));
                (probs.mul_out(&out, &per_row), h.to_kind(reduced))
            };
            (
                grad_logits.matmul(&self.wte),
                grad_logits.tr().matmul(&h),
                loss,
            )
        };
        // The hidden states' gradient reaches autograd as that of a dot product with
        // it; wte's goes straight into its gradient (after `init_grads`, always there).
        let through = (&hidden * grad_hidden.view(hidden.size().as_slice())).sum(Kind::Float);
        let mut wte_grad = self.wte.grad();
        if wte_grad.defined() {
            tch::no_grad(|| {
                let _ = wte_grad.g_add_(&grad_wte);
            });
            through.backward();
        } else {
            (through + (&self.wte * grad_wte).sum(Kind::Float)).backward();
        }
        loss
    }

    /// Per-token log-probabilities of `targets` `[B, T]` under the model given `idx`.
    pub fn token_logprobs(&self, idx: &Tensor, targets: &Tensor, train: bool) -> Tensor {
        let logits = self.forward(idx, train);
        logits
            .log_softmax(-1, Kind::Float)
            .gather(2, &targets.unsqueeze(-1), false)
            .squeeze_dim(-1)
    }
}

/// Conv1D: `x @ W + b` with `W: [in, out]`.
fn linear(x: &Tensor, (w, b): &(Tensor, Tensor)) -> Tensor {
    let shape = x.size();
    let (inp, out) = (shape[shape.len() - 1], w.size()[1]);
    let mut out_shape = shape.clone();
    *out_shape.last_mut().unwrap() = out;
    b.addmm(&x.reshape([-1, inp]), w).view(out_shape.as_slice())
}

/// Mean next-token cross-entropy over positions where `targets != ignore`.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor, ignore: i64) -> Tensor {
    let v = logits.size()[2];
    logits.reshape([-1, v]).cross_entropy_loss::<Tensor>(
        &targets.reshape([-1]),
        None,
        tch::Reduction::Mean,
        ignore,
        0.0,
    )
}

/// Mean cross-entropy of each row over its labelled positions: `[B]`.
pub fn cross_entropy_per_row(logits: &Tensor, targets: &Tensor) -> Tensor {
    let (b, t, v) = logits.size3().expect("logits are [batch, time, vocab]");
    let mask = targets.ne(-100).to_kind(Kind::Float);
    let per_token = logits
        .reshape([-1, v])
        .cross_entropy_loss::<Tensor>(
            &targets.reshape([-1]),
            None,
            tch::Reduction::None,
            -100,
            0.0,
        )
        .view([b, t]);
    (per_token * &mask).sum_dim_intlist(-1, false, Kind::Float)
        / mask.sum_dim_intlist(-1, false, Kind::Float).clamp_min(1.0)
}
