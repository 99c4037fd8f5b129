//! What the daemon does when a worker hangs or fails (`supervisor.on_stall`,
//! `on_failure`, `on_diverged`), how long each phase of a worker may go without a
//! heartbeat (`stale_after_s`, learned when `auto`), and whether an interrupted
//! pipeline resumes when the daemon starts. The keys sit in the `supervisor:`
//! section ([`super::SupervisorConfig`]); their types are here, their checks in
//! `validate.rs`.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::failure::FailureKind;

/// `supervisor.stale_after_s`: how long a training worker may go without a
/// heartbeat. `auto` learns it from the run's own heartbeats ([`StaleAuto`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StaleAfter {
    Auto,
    /// Seconds; fractions allowed.
    Seconds(f64),
}

impl fmt::Display for StaleAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StaleAfter::Auto => f.write_str("auto"),
            StaleAfter::Seconds(s) => write!(f, "{s}"),
        }
    }
}

impl Serialize for StaleAfter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StaleAfter::Auto => s.serialize_str("auto"),
            StaleAfter::Seconds(secs) => s.serialize_f64(*secs),
        }
    }
}

impl<'de> Deserialize<'de> for StaleAfter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct StaleVisitor;
        impl Visitor<'_> for StaleVisitor {
            type Value = StaleAfter;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`auto` or a number of seconds")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(StaleAfter::Seconds(v as f64))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(StaleAfter::Seconds(v as f64))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(StaleAfter::Seconds(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "auto" => Ok(StaleAfter::Auto),
                    other => Err(E::custom(format!(
                        "`{other}` is neither `auto` nor a number of seconds; give one of them (e.g. auto, or 300)"
                    ))),
                }
            }
        }
        d.deserialize_any(StaleVisitor)
    }
}

/// `supervisor.replay_tolerance`: how close the steps a resumed worker trains again
/// must come to what they gave the first time (`lavender::replay`). `auto`: bit for
/// bit for `lavender-worker` on the CPU (its resume is exact there), else
/// [`ReplayTolerance::DEFAULT_RELATIVE`] (`Config::replay_tolerance`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReplayTolerance {
    Auto,
    Exact,
    /// `|a - b| <= r * max(|a|, |b|)`.
    Relative(f64),
}

impl ReplayTolerance {
    /// `auto`'s tolerance where a resume is not bit for bit (a GPU's kernels sum in
    /// another order from run to run; another thread count splits sums otherwise):
    /// such differences start near the float's precision and grow slowly over a
    /// replay, while a resume that trains other data, or draws other noise, differs
    /// by the loss's own step-to-step spread from its first step on.
    pub const DEFAULT_RELATIVE: f64 = 0.02;
}

impl fmt::Display for ReplayTolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayTolerance::Auto => f.write_str("auto"),
            ReplayTolerance::Exact => f.write_str("exact"),
            ReplayTolerance::Relative(r) => write!(f, "{r}"),
        }
    }
}

impl Serialize for ReplayTolerance {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ReplayTolerance::Relative(r) => s.serialize_f64(*r),
            other => s.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for ReplayTolerance {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ToleranceVisitor;
        impl Visitor<'_> for ToleranceVisitor {
            type Value = ReplayTolerance;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`auto`, `exact` or a relative tolerance (e.g. 0.02)")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                self.visit_f64(v as f64)
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                self.visit_f64(v as f64)
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                if v.is_finite() && (0.0..1.0).contains(&v) {
                    Ok(ReplayTolerance::Relative(v))
                } else {
                    Err(E::custom(format!(
                        "{v} is not a relative tolerance: give a fraction from 0 to below 1 (e.g. 0.02), or `exact`"
                    )))
                }
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "auto" => Ok(ReplayTolerance::Auto),
                    "exact" => Ok(ReplayTolerance::Exact),
                    other => Err(E::custom(format!(
                        "`{other}` is not a tolerance; give auto, exact or a fraction (e.g. 0.02)"
                    ))),
                }
            }
        }
        d.deserialize_any(ToleranceVisitor)
    }
}

/// `supervisor.drill`: restore drills while training goes on (`lavenderd drill` on
/// the run's newest verified checkpoint it trained past), every N newly verified
/// checkpoints and/or every H hours; both `null` (the default): none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrillSchedule {
    pub every_checkpoints: Option<u64>,
    pub every_hours: Option<f64>,
    /// The device a drill's worker trains on (`lavender-worker`'s `device`, e.g. a
    /// second GPU `cuda:1`); `None`: the run's.
    #[serde(default)]
    pub device: Option<String>,
}

impl DrillSchedule {
    pub fn enabled(&self) -> bool {
        self.every_checkpoints.is_some() || self.every_hours.is_some()
    }
}

/// `supervisor.on_resume_mismatch`: what a replayed step that differs gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnResumeMismatch {
    /// A `resume_mismatch` decision and an alert; training goes on.
    #[default]
    Alert,
    /// The same, and the pipeline is stopped (the worker saves and exits).
    Stop,
}

/// `supervisor.stale_auto`: how `stale_after_s: auto` learns. The allowance is
/// `factor` × the longest interval seen between two training heartbeats of the
/// run, kept within `floor_s ..= ceiling_s`; `ceiling_s` until one is seen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaleAuto {
    pub factor: f64,
    pub floor_s: f64,
    pub ceiling_s: f64,
}

impl StaleAuto {
    /// The allowance for a run whose longest steady interval so far is `longest_s`.
    pub fn allowance_s(&self, longest_s: Option<f64>) -> f64 {
        match longest_s {
            Some(longest) => (self.factor * longest).clamp(self.floor_s, self.ceiling_s),
            None => self.ceiling_s,
        }
    }
}

/// `supervisor.slowdown`: training slower than its own baseline. The step time's
/// rolling median above `factor` × the stage's baseline for `for_s` seconds raises
/// an alert (and one when it recovers).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slowdown {
    pub factor: f64,
    pub for_s: f64,
}

impl Default for Slowdown {
    fn default() -> Slowdown {
        Slowdown {
            factor: 1.3,
            for_s: 300.0,
        }
    }
}

/// `supervisor.on_stall`: what a hung worker gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStall {
    /// Killed (its process group, or its Slurm job) and restarted from the run's
    /// latest complete checkpoint.
    #[default]
    Restart,
    /// An alert only; the worker is left as it is.
    Alert,
}

/// `supervisor.mode`: whether the daemon acts on what it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SupervisorMode {
    /// Kill, restart, roll back and prune as the rules say.
    #[default]
    Act,
    /// Decide as `act` would and write each decision down as "would have"
    /// (`state/decisions.jsonl`, the pipeline log), but never kill, restart, roll
    /// back or delete a checkpoint: for a run something else manages.
    Observe,
}

/// What the daemon does with a worker that ended with a failure of some kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureAction {
    /// The pipeline fails at once: the failure would repeat.
    Fail,
    /// Restarted from the latest complete checkpoint (first at once, then after
    /// `restart_backoff_s`).
    Restart,
}

impl FailureAction {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureAction::Fail => "fail",
            FailureAction::Restart => "restart",
        }
    }
}

/// `supervisor.on_failure`: the action per failure kind (a divergence has its own
/// key, `on_diverged`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnFailure {
    pub config: FailureAction,
    pub incompatible_checkpoint: FailureAction,
    pub data: FailureAction,
    pub out_of_memory: FailureAction,
    pub crash: FailureAction,
}

impl OnFailure {
    /// The action for `kind`; `None` for `diverged` (see `on_diverged`).
    pub fn action(&self, kind: FailureKind) -> Option<FailureAction> {
        Some(match kind {
            FailureKind::Config => self.config,
            FailureKind::IncompatibleCheckpoint => self.incompatible_checkpoint,
            FailureKind::Data => self.data,
            FailureKind::OutOfMemory => self.out_of_memory,
            FailureKind::Crash => self.crash,
            // Not a choice: set aside, and restarted at once from the one before.
            FailureKind::DamagedCheckpoint => FailureAction::Restart,
            // Not a choice either: waited out, then resumed (the daemon's `disk` wait).
            FailureKind::DiskFull => FailureAction::Restart,
            // Would repeat: the file is not there until someone restores it.
            FailureKind::MissingRunFile => FailureAction::Fail,
            FailureKind::Diverged => return None,
        })
    }
}

/// `supervisor.on_diverged`: what a worker that stopped with `diverged` gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDiverged {
    /// Restarted from the newest checkpoint saved before the divergence began,
    /// skipping the data that led to it (at most `max_rollbacks` times within
    /// `rollback_window_steps`).
    #[default]
    Rollback,
    /// The pipeline fails, naming the divergence.
    Fail,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_allowance_is_clamped_and_the_ceiling_until_learned() {
        let a = StaleAuto {
            factor: 5.0,
            floor_s: 60.0,
            ceiling_s: 1800.0,
        };
        assert_eq!(a.allowance_s(None), 1800.0);
        assert_eq!(a.allowance_s(Some(1.0)), 60.0);
        assert_eq!(a.allowance_s(Some(30.0)), 150.0);
        assert_eq!(a.allowance_s(Some(3600.0)), 1800.0);
    }

    #[test]
    fn every_kind_but_diverged_has_an_action() {
        let p = OnFailure {
            config: FailureAction::Fail,
            incompatible_checkpoint: FailureAction::Fail,
            data: FailureAction::Fail,
            out_of_memory: FailureAction::Restart,
            crash: FailureAction::Restart,
        };
        for kind in FailureKind::ALL {
            assert_eq!(p.action(kind).is_none(), kind == FailureKind::Diverged);
        }
        assert_eq!(p.action(FailureKind::Data), Some(FailureAction::Fail));
    }
}
