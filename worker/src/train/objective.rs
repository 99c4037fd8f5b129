//! Each stage's loss and held-out evaluation.

use tch::{Kind, Tensor};

use super::data::{DpoData, IGNORE, LmBatch, PretrainData, Rows, SftData};
use crate::model::Gpt;
use crate::model::gpt2::cross_entropy;

/// A held-out evaluation: the stage's loss and named extra metrics.
#[derive(Debug, Clone, Default)]
pub struct Eval {
    pub loss: f64,
    pub metrics: Vec<(&'static str, f64)>,
}

pub enum Objective {
    /// Next-token cross-entropy on pretraining windows.
    Pretrain {
        data: PretrainData,
        eval: Vec<LmBatch>,
    },
    /// Cross-entropy on response tokens only.
    Sft { data: SftData, eval: Vec<LmBatch> },
    /// Direct preference optimisation against a frozen reference model.
    Dpo {
        data: DpoData,
        eval: Vec<LmBatch>,
        reference: Box<Gpt>,
        beta: f64,
    },
}

impl Objective {
    pub fn len(&self) -> usize {
        match self {
            Objective::Pretrain { data, .. } => data.len(),
            Objective::Sft { data, .. } => data.len(),
            Objective::Dpo { data, .. } => data.len(),
        }
    }

    /// Mixed-in hard-example windows (pretraining only).
    pub fn hard_windows(&self) -> usize {
        match self {
            Objective::Pretrain { data, .. } => data.hard_windows(),
            _ => 0,
        }
    }

    /// Rows of a training batch of `batch_size` samples, at most: DPO's hold a
    /// chosen and a rejected row per sample.
    pub fn rows_per_batch(&self, batch_size: usize) -> usize {
        match self {
            Objective::Dpo { .. } => 2 * batch_size,
            _ => batch_size,
        }
    }

    /// The training batch of samples `indices`, before it becomes tensors.
    pub fn rows(&self, indices: &[usize]) -> Rows {
        match self {
            Objective::Pretrain { data, .. } => data.rows(indices),
            Objective::Sft { data, .. } => data.rows(indices),
            Objective::Dpo { data, .. } => data.rows(indices),
        }
    }

    /// Trains on one micro-batch: accumulates `scale` × the gradient of its loss into
    /// the model's parameters and returns the loss, a scalar f64 tensor on the
    /// device (not read back: the trainer reads losses at log steps).
    pub fn backward(&self, model: &Gpt, batch: &LmBatch, scale: f64) -> Tensor {
        match self {
            Objective::Pretrain { .. } | Objective::Sft { .. } => {
                model.train_next_token(&batch.input, &batch.labels, IGNORE, scale)
            }
            Objective::Dpo {
                reference, beta, ..
            } => {
                let loss = dpo_terms(model, reference, batch, *beta, true).loss;
                (&loss * scale).backward();
                loss.detach().to_kind(Kind::Double)
            }
        }
    }

    pub fn evaluate(&self, model: &Gpt) -> Eval {
        let _guard = tch::no_grad_guard();
        match self {
            Objective::Pretrain { eval, .. } | Objective::Sft { eval, .. } => {
                let losses: Vec<f64> = eval
                    .iter()
                    .map(|b| lm_loss(model, b, false).double_value(&[]))
                    .collect();
                Eval {
                    loss: mean(&losses),
                    metrics: Vec::new(),
                }
            }
            Objective::Dpo {
                eval,
                reference,
                beta,
                ..
            } => {
                let (mut loss, mut acc, mut margin, mut pref, mut n) = (0.0, 0.0, 0.0, 0.0, 0.0);
                for b in eval {
                    let t = dpo_terms(model, reference, b, *beta, false);
                    let pairs = t.chosen_reward.size()[0] as f64;
                    loss += t.loss.double_value(&[]) * pairs;
                    let diff = &t.chosen_reward - &t.rejected_reward;
                    // Ties (a policy still equal to its reference) count half.
                    let wins = diff
                        .gt(0.0)
                        .to_kind(Kind::Double)
                        .sum(Kind::Double)
                        .double_value(&[]);
                    let ties = diff
                        .eq(0.0)
                        .to_kind(Kind::Double)
                        .sum(Kind::Double)
                        .double_value(&[]);
                    acc += wins + 0.5 * ties;
                    margin += diff.sum(Kind::Double).double_value(&[]);
                    pref += t
                        .policy_chosen
                        .gt_tensor(&t.policy_rejected)
                        .to_kind(Kind::Double)
                        .sum(Kind::Double)
                        .double_value(&[]);
                    n += pairs;
                }
                let n = n.max(1.0);
                Eval {
                    loss: loss / n,
                    metrics: vec![
                        ("reward_accuracy", acc / n),
                        ("reward_margin", margin / n),
                        ("preference_accuracy", pref / n),
                    ],
                }
            }
        }
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn lm_loss(model: &Gpt, b: &LmBatch, train: bool) -> Tensor {
    cross_entropy(&model.forward(&b.input, train), &b.labels, IGNORE)
}

/// Sum of the log-probabilities of each row's labelled tokens: `[rows]`.
pub fn sequence_logps(model: &Gpt, b: &LmBatch, train: bool) -> Tensor {
    let mask = b.labels.ne(IGNORE);
    let targets = b.labels.where_scalarother(&mask, 0);
    let lp = model.token_logprobs(&b.input, &targets, train);
    (lp * mask.to_kind(Kind::Float)).sum_dim_intlist(-1, false, Kind::Float)
}

struct DpoTerms {
    loss: Tensor,
    chosen_reward: Tensor,
    rejected_reward: Tensor,
    policy_chosen: Tensor,
    policy_rejected: Tensor,
}

/// `−log σ(β·[(log π(c) − log π_ref(c)) − (log π(r) − log π_ref(r))])`, batch mean.
/// The batch holds the chosen rows, then the rejected rows.
fn dpo_terms(policy: &Gpt, reference: &Gpt, b: &LmBatch, beta: f64, train: bool) -> DpoTerms {
    let pol = sequence_logps(policy, b, train);
    let refl = tch::no_grad(|| sequence_logps(reference, b, false));
    let half = pol.size()[0] / 2;
    let (pc, pr) = (pol.narrow(0, 0, half), pol.narrow(0, half, half));
    let (rc, rr) = (refl.narrow(0, 0, half), refl.narrow(0, half, half));
    let chosen_reward = (&pc - &rc) * beta;
    let rejected_reward = (&pr - &rr) * beta;
    let loss = -(&chosen_reward - &rejected_reward)
        .log_sigmoid()
        .mean(Kind::Float);
    DpoTerms {
        loss,
        chosen_reward: chosen_reward.detach(),
        rejected_reward: rejected_reward.detach(),
        policy_chosen: pc.detach(),
        policy_rejected: pr.detach(),
    }
}
