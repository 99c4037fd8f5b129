//! Scale presets: how long a run is, how many shards it trains on and the model it
//! builds. The numbers live in the config's `scales` section (`configs/default.yaml`).

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

/// What a scale means in numbers: one entry of the config's `scales` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalePreset {
    /// Optimizer steps over all stages whose `steps` is null.
    pub total_steps: u64,
    /// Training shards a run of this scale asks for, over its four chunks.
    pub shards: u32,
    /// The model for every `model.*` size key that is null.
    pub model: ModelSize,
}

/// A GPT-2 model's size: layers, heads, width and context length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSize {
    pub n_layer: u32,
    pub n_head: u32,
    pub n_embd: u32,
    pub n_positions: u32,
}

/// The `scales` section: what each `--scale` means (`configs/default.yaml` has the
/// built-in numbers and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalesConfig {
    pub tiny: ScalePreset,
    pub small: ScalePreset,
    pub medium: ScalePreset,
    pub large: ScalePreset,
}

impl ScalesConfig {
    /// The preset of `scale`.
    pub fn get(&self, scale: Scale) -> &ScalePreset {
        match scale {
            Scale::Tiny => &self.tiny,
            Scale::Small => &self.small,
            Scale::Medium => &self.medium,
            Scale::Large => &self.large,
        }
    }
}

impl Scale {
    pub const ALL: [Scale; 4] = [Scale::Tiny, Scale::Small, Scale::Medium, Scale::Large];

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

/// A corpus that fills fewer shards than its scale's preset asks for: training then
/// repeats the same text more often than the preset intends. `start`, the status and
/// the worker's `shards_short` milestone all say it with this type's one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardShortfall {
    pub scale: Scale,
    /// `scales.<scale>.shards`.
    pub wanted: u64,
    /// Shards `build_shards` filled from the corpus.
    pub available: u64,
}

impl ShardShortfall {
    /// `Some` when `available` is less than `wanted`.
    pub fn check(scale: Scale, wanted: u64, available: u64) -> Option<ShardShortfall> {
        (available < wanted).then_some(ShardShortfall {
            scale,
            wanted,
            available,
        })
    }
}

impl fmt::Display for ShardShortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        write!(
            f,
            "scale {} wants {} shard{} but the data fills only {}, so training repeats it; add corpus under data.sources",
            self.scale,
            self.wanted,
            plural(self.wanted),
            self.available
        )
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
