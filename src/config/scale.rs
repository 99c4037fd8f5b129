//! Scale presets: how long a run is and how many shards the corpus is cut into.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, ConfigErrorKind, nearest};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    Tiny,
    Small,
    Medium,
    Large,
}

/// What a scale means in numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalePreset {
    /// Optimizer steps over all stages whose `steps` is null.
    pub total_steps: u64,
    /// Number of training shards `build_shards` writes.
    pub shards: u32,
}

impl Scale {
    pub const ALL: [Scale; 4] = [Scale::Tiny, Scale::Small, Scale::Medium, Scale::Large];

    /// Tiny is sized so a 2-layer GPT on two CPU cores finishes in minutes, with enough
    /// pretraining steps (980) to bring its validation loss under 60 % of the start.
    pub fn preset(self) -> ScalePreset {
        let (total_steps, shards) = match self {
            Scale::Tiny => (1_400, 4),
            Scale::Small => (50_000, 21),
            Scale::Medium => (105_000, 43),
            Scale::Large => (200_000, 81),
        };
        ScalePreset {
            total_steps,
            shards,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Tiny => "tiny",
            Scale::Small => "small",
            Scale::Medium => "medium",
            Scale::Large => "large",
        }
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scale {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let names = Scale::ALL.map(Scale::as_str);
        Scale::ALL
            .into_iter()
            .find(|scale| scale.as_str() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                ConfigError::new(ConfigErrorKind::UnknownValue {
                    path: "scale".into(),
                    found: s.to_string(),
                    suggestion: nearest(s, &names).map(str::to_string),
                    valid: names.iter().map(|n| n.to_string()).collect(),
                })
            })
    }
}

/// Relative share of the preset's steps for a stage whose `steps` is null: pretrain
/// gets 70 %, each other stage 15 % (so pretrain/sft/dpo split 70/15/15).
fn stage_weight(name: &str) -> u64 {
    if name == "pretrain" { 70 } else { 15 }
}

/// Splits `total` across the stages named in `names` by [`stage_weight`], rounding so
/// the parts add up to `total` exactly (largest remainder), each at least 1.
pub(crate) fn split_steps(total: u64, names: &[&str]) -> Vec<u64> {
    let weights: Vec<u128> = names.iter().map(|n| u128::from(stage_weight(n))).collect();
    let sum: u128 = weights.iter().sum();
    if sum == 0 {
        return Vec::new();
    }
    let total = u128::from(total);
    let mut parts: Vec<u128> = weights.iter().map(|w| total * w / sum).collect();
    let mut order: Vec<usize> = (0..names.len()).collect();
    // Largest fractional remainder first; ties go to the earlier stage.
    order.sort_by_key(|&i| std::cmp::Reverse(total * weights[i] % sum));
    let assigned: u128 = parts.iter().sum();
    for &i in order.iter().take((total - assigned) as usize) {
        parts[i] += 1;
    }
    parts
        .into_iter()
        .map(|p| u64::try_from(p).unwrap_or(u64::MAX).max(1))
        .collect()
}
