//! `training.precision` for the device the run trains on, the autocast it puts
//! around forward and backward, and fp16's dynamic loss scale.
//!
//! The weights the optimizer updates, its moments and every checkpoint stay fp32:
//! autocast casts weights to the reduced precision as each matrix product needs
//! them, and gradients come back to the fp32 weights.

use anyhow::{Context, Result, ensure};
use lavender::config::Precision as Choice;
use serde_json::{Value, json};
use tch::Device;

use super::device;
use crate::native::{Autocast, HalfKind};

/// The precision a run trains in, `auto` resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    Bf16,
    Fp16,
}

/// CUDA devices from this compute capability (Ampere) compute bf16 natively.
const NATIVE_BF16_MAJOR: i32 = 8;

impl Precision {
    /// `auto` is bf16 on a CUDA device that computes it natively, fp32 elsewhere
    /// (the CPU, MPS, older GPUs); the others are what they say.
    pub fn resolve(choice: Choice, device: Device) -> Precision {
        match choice {
            Choice::Fp32 => Precision::Fp32,
            Choice::Bf16 => Precision::Bf16,
            Choice::Fp16 => Precision::Fp16,
            Choice::Auto => match device {
                Device::Cuda(n)
                    if device::cuda_capability(n)
                        .is_some_and(|(major, _)| major >= NATIVE_BF16_MAJOR) =>
                {
                    Precision::Bf16
                }
                _ => Precision::Fp32,
            },
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }

    /// Autocast on `device` while the guard lives; none in fp32.
    pub fn autocast(self, device: Device) -> Result<Option<Autocast>> {
        let kind = match self {
            Precision::Fp32 => return Ok(None),
            Precision::Bf16 => HalfKind::BFloat16,
            Precision::Fp16 => HalfKind::Float16,
        };
        Autocast::enter(device, kind).map(Some)
    }

    /// fp16 needs a loss scale: its small gradients would underflow to zero.
    pub fn loss_scaler(self) -> Option<LossScaler> {
        (self == Precision::Fp16).then(LossScaler::default)
    }
}

/// The `trainer_state.json` key (under its extra fields) of the loss scaler's state.
pub const LOSS_SCALER_KEY: &str = "loss_scaler";

/// fp16's dynamic loss scale, as `torch.amp.GradScaler` keeps it: gradients are
/// computed for `scale × loss` and divided by `scale` before clipping; a step whose
/// gradient is not finite is skipped and halves the scale, and `GROWTH_INTERVAL`
/// finite steps in a row double it. Saved in each checkpoint, so a resumed run
/// scales exactly as the interrupted one would have.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaler {
    scale: f64,
    /// Finite steps since the scale last changed.
    growth_tracker: u32,
}

const INITIAL_SCALE: f64 = 65536.0;
const GROWTH_FACTOR: f64 = 2.0;
const BACKOFF_FACTOR: f64 = 0.5;
const GROWTH_INTERVAL: u32 = 2000;

impl Default for LossScaler {
    fn default() -> Self {
        LossScaler {
            scale: INITIAL_SCALE,
            growth_tracker: 0,
        }
    }
}

impl LossScaler {
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// After a step whose unscaled gradient was (not) finite; returns whether the
    /// optimizer may apply it.
    pub fn update(&mut self, finite: bool) -> bool {
        if finite {
            self.growth_tracker += 1;
            if self.growth_tracker == GROWTH_INTERVAL {
                self.scale *= GROWTH_FACTOR;
                self.growth_tracker = 0;
            }
        } else {
            self.scale *= BACKOFF_FACTOR;
            self.growth_tracker = 0;
        }
        finite
    }

    pub fn to_json(self) -> Value {
        json!({ "scale": self.scale, "growth_tracker": self.growth_tracker })
    }

    pub fn from_json(v: &Value) -> Result<LossScaler> {
        let scale = v
            .get("scale")
            .and_then(Value::as_f64)
            .context("loss_scaler.scale is missing or not a number")?;
        ensure!(
            scale.is_finite() && scale > 0.0,
            "loss_scaler.scale = {scale} is not a positive number"
        );
        let growth_tracker = v
            .get("growth_tracker")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .context("loss_scaler.growth_tracker is missing or not a count")?;
        Ok(LossScaler {
            scale,
            growth_tracker,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_fp32_off_cuda_and_explicit_choices_stand() {
        assert_eq!(
            Precision::resolve(Choice::Auto, Device::Cpu),
            Precision::Fp32
        );
        assert_eq!(
            Precision::resolve(Choice::Auto, Device::Mps),
            Precision::Fp32
        );
        assert_eq!(
            Precision::resolve(Choice::Bf16, Device::Cpu),
            Precision::Bf16
        );
        assert_eq!(
            Precision::resolve(Choice::Fp16, Device::Cpu),
            Precision::Fp16
        );
        assert!(Precision::Fp32.autocast(Device::Cpu).unwrap().is_none());
        assert!(Precision::Bf16.loss_scaler().is_none());
        assert!(Precision::Fp16.loss_scaler().is_some());
    }

    #[test]
    fn the_loss_scale_backs_off_on_overflow_and_grows_after_an_interval() {
        let mut s = LossScaler::default();
        assert_eq!(s.scale(), 65536.0);
        assert!(!s.update(false), "a non-finite step is skipped");
        assert_eq!(s.scale(), 32768.0);
        for _ in 0..GROWTH_INTERVAL - 1 {
            assert!(s.update(true));
        }
        assert_eq!(s.scale(), 32768.0, "not yet");
        s.update(true);
        assert_eq!(s.scale(), 65536.0, "doubled after the interval");
        s.update(true);
        s.update(false);
        assert_eq!((s.scale(), s.growth_tracker), (32768.0, 0));
    }

    #[test]
    fn the_loss_scaler_round_trips_through_json() {
        let mut s = LossScaler::default();
        s.update(false);
        s.update(true);
        s.update(true);
        let text = serde_json::to_string(&s.to_json()).unwrap();
        let back = LossScaler::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, s);
        let err = LossScaler::from_json(&json!({"scale": -1.0, "growth_tracker": 0})).unwrap_err();
        assert!(err.to_string().contains("loss_scaler.scale"), "{err}");
        assert!(LossScaler::from_json(&json!({"scale": 2.0})).is_err());
    }
}
