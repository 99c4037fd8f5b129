//! `state/goodput.json`: where a run's wall time went. The daemon's ledger
//! (`daemon/src/goodput/`) is its one writer; it keeps, per run, the seconds in each
//! [`Bucket`], its working state, and the figures computed from them
//! ([`GoodputStatus`], the status's `goodput`). Everyone else reads the figures of
//! one run through a partial view of the file ([`read_status`]), so `lavenderd
//! status` shows them with the daemon down.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name of the ledger inside the state directory.
pub const FILE: &str = "goodput.json";

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// Where a second of a run's wall time went. Every second of a run is in exactly
/// one bucket: `productive` is goodput, `stopped` is kept apart (an operator's stop,
/// a Slurm job pending, a suspended machine), the rest is badput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bucket {
    /// Training steps whose result was kept.
    Productive,
    /// Launch → the worker's first step (or its `loading`).
    Startup,
    /// The worker says `loading`: a checkpoint or the data being read.
    Restore,
    /// Training held by a save (`saving`, or a save event's `stall_s`).
    SaveStall,
    /// The worker says `evaluating`.
    Eval,
    /// A data step (downloads … precompute, mine_hard) runs.
    DataSteps,
    /// A hung worker's last heartbeat → its kill.
    HangDetection,
    /// A crashed worker's exit → the next launch.
    Backoff,
    /// Steps computed, then thrown away by a crash, a hang or a rollback.
    Rework,
    /// Not counted against the run.
    Stopped,
}

impl Bucket {
    pub const ALL: [Bucket; 10] = [
        Bucket::Productive,
        Bucket::Startup,
        Bucket::Restore,
        Bucket::SaveStall,
        Bucket::Eval,
        Bucket::DataSteps,
        Bucket::HangDetection,
        Bucket::Backoff,
        Bucket::Rework,
        Bucket::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Productive => "productive",
            Bucket::Startup => "startup",
            Bucket::Restore => "restore",
            Bucket::SaveStall => "save_stall",
            Bucket::Eval => "eval",
            Bucket::DataSteps => "data_steps",
            Bucket::HangDetection => "hang_detection",
            Bucket::Backoff => "backoff",
            Bucket::Rework => "rework",
            Bucket::Stopped => "stopped",
        }
    }

    /// The short name in `lavenderd status`'s line.
    pub fn short(self) -> &'static str {
        match self {
            Bucket::HangDetection => "hang",
            Bucket::SaveStall => "save",
            Bucket::DataSteps => "data",
            b => b.as_str(),
        }
    }

    /// Lost time: neither productive nor kept apart.
    pub fn is_badput(self) -> bool {
        !matches!(self, Bucket::Productive | Bucket::Stopped)
    }

    fn index(self) -> usize {
        Bucket::ALL.iter().position(|b| *b == self).unwrap_or(0)
    }
}

impl std::fmt::Display for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Seconds per bucket, written as `{bucket: seconds}` with every bucket present.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Buckets([f64; 10]);

impl Buckets {
    pub fn get(&self, b: Bucket) -> f64 {
        self.0[b.index()]
    }

    pub fn add(&mut self, b: Bucket, seconds: f64) {
        self.0[b.index()] += seconds;
    }

    /// Moves up to `seconds` from `from` to `to` (never below zero); returns what moved.
    pub fn transfer(&mut self, from: Bucket, to: Bucket, seconds: f64) -> f64 {
        let moved = seconds.clamp(0.0, self.get(from));
        self.0[from.index()] -= moved;
        self.0[to.index()] += moved;
        moved
    }

    /// Every bucket's seconds: the wall time.
    pub fn wall(&self) -> f64 {
        self.0.iter().sum()
    }

    pub fn badput(&self) -> f64 {
        Bucket::ALL
            .iter()
            .filter(|b| b.is_badput())
            .map(|b| self.get(*b))
            .sum()
    }

    /// productive / (wall − stopped); `None` before anything counted.
    pub fn goodput(&self) -> Option<f64> {
        let counted = self.wall() - self.get(Bucket::Stopped);
        (counted > 0.0).then(|| self.get(Bucket::Productive) / counted)
    }

    pub fn plus(mut self, other: &Buckets) -> Buckets {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
        self
    }
}

impl Serialize for Buckets {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(Bucket::ALL.len()))?;
        for b in Bucket::ALL {
            // Milliseconds are plenty, and keep the file readable.
            map.serialize_entry(b.as_str(), &((self.get(b) * 1000.0).round() / 1000.0))?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Buckets {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Buckets, D::Error> {
        let map = BTreeMap::<Bucket, f64>::deserialize(d)?;
        let mut out = Buckets::default();
        for (b, s) in map {
            out.add(b, s);
        }
        Ok(out)
    }
}

/// The status's `goodput`: the current run's ledger and what follows from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoodputStatus {
    /// The run's directory name.
    pub run: String,
    /// Seconds since the run's first launch (every bucket's sum).
    pub wall_s: f64,
    pub seconds: Buckets,
    /// Badput: wall − productive − stopped.
    pub lost_s: f64,
    /// productive / (wall − stopped), 0–1; over the whole run and the last 24 hours.
    pub goodput: Option<f64>,
    pub goodput_24h: Option<f64>,
    /// How often the run was interrupted, by kind (`failed`, `hung`, `rolled_back`,
    /// `power_loss`, `daemon_exit`).
    pub interruptions: BTreeMap<String, u32>,
    /// Mean time between failures (the counted wall time over the failures).
    pub mtbf_s: Option<f64>,
    /// Mean time from a failure to training past the step it had reached.
    pub mttr_s: Option<f64>,
    /// The run's measured save cost: mean time a save held training.
    pub save_cost_s: Option<f64>,
    /// The configured checkpoint interval beside the Young–Daly one.
    pub checkpoint: Option<CheckpointAdvice>,
    /// The current stage's step time against its baseline (the slowdown detector).
    pub step_time: Option<TrainStepTime>,
    /// RFC 3339 UTC: the end of the last second the ledger counted into the run.
    pub updated_at: String,
}

/// `checkpoint_every` beside Young–Daly's √(2 · C · MTBF).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointAdvice {
    /// `training.stages[].checkpoint_every` (the largest), in steps.
    pub every_steps: u64,
    /// The same in seconds at the baseline step time.
    pub every_s: Option<f64>,
    pub young_daly_s: f64,
    pub young_daly_steps: Option<u64>,
    /// One line when the two differ by more than 2×.
    pub advice: Option<String>,
}

/// Seconds per optimizer step of one stage: the baseline (a rolling median) and now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainStepTime {
    pub stage: String,
    pub baseline_s: f64,
    pub current_s: f64,
    /// True while the slowdown alert stands.
    pub slow: bool,
}

impl GoodputStatus {
    /// `goodput 94.2 % · lost 38 min: rework 21 · hang 9 · restore 5 · startup 3`
    /// (minutes; buckets under half a minute left out, largest first).
    pub fn line(&self) -> String {
        let Some(g) = self.goodput else {
            return "goodput: nothing counted yet".into();
        };
        let mut lost: Vec<(Bucket, f64)> = Bucket::ALL
            .iter()
            .filter(|b| b.is_badput())
            .map(|b| (*b, self.seconds.get(*b)))
            .collect();
        lost.sort_by(|a, b| b.1.total_cmp(&a.1));
        let (unit, div) = if self.lost_s >= 90.0 {
            ("min", 60.0)
        } else {
            ("s", 1.0)
        };
        let parts: Vec<String> = lost
            .iter()
            .filter(|(_, s)| s / div >= 0.5)
            .map(|(b, s)| format!("{} {:.0}", b.short(), s / div))
            .collect();
        let mut line = format!(
            "goodput {:.1} % · lost {:.0} {unit}",
            g * 100.0,
            self.lost_s / div
        );
        if !parts.is_empty() {
            line.push_str(": ");
            line.push_str(&parts.join(" · "));
        }
        line
    }
}

/// The figures of `run` (its directory name) in the ledger under `state_dir`; `None`
/// when the file or the run's section is missing or does not parse (the ledger is
/// an account, not a precondition of anything).
pub fn read_status(state_dir: &Path, run: &str) -> Option<GoodputStatus> {
    #[derive(Deserialize)]
    struct View {
        pipeline: PipelineView,
    }
    #[derive(Deserialize)]
    struct PipelineView {
        runs: BTreeMap<String, RunView>,
    }
    #[derive(Deserialize)]
    struct RunView {
        figures: GoodputStatus,
    }
    let bytes = std::fs::read(path(state_dir)).ok()?;
    let mut view: View = serde_json::from_slice(&bytes).ok()?;
    view.pipeline.runs.remove(run).map(|r| r.figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_add_up_and_goodput_leaves_stopped_apart() {
        let mut b = Buckets::default();
        b.add(Bucket::Productive, 90.0);
        b.add(Bucket::Rework, 10.0);
        b.add(Bucket::Stopped, 100.0);
        assert_eq!(b.wall(), 200.0);
        assert_eq!(b.badput(), 10.0);
        assert_eq!(b.goodput(), Some(0.9));
        assert_eq!(b.transfer(Bucket::Productive, Bucket::Rework, 200.0), 90.0);
        assert_eq!(b.get(Bucket::Productive), 0.0);
        let json = serde_json::to_value(b).unwrap();
        assert_eq!(json["rework"], 100.0);
        assert_eq!(json.as_object().unwrap().len(), 10);
        assert_eq!(serde_json::from_value::<Buckets>(json).unwrap(), b);
    }

    #[test]
    fn the_line_names_the_largest_losses_in_minutes() {
        let mut seconds = Buckets::default();
        seconds.add(Bucket::Productive, 36_000.0);
        seconds.add(Bucket::Rework, 21.0 * 60.0);
        seconds.add(Bucket::HangDetection, 9.0 * 60.0);
        seconds.add(Bucket::Restore, 5.0 * 60.0);
        seconds.add(Bucket::Startup, 3.0 * 60.0);
        seconds.add(Bucket::Backoff, 10.0);
        let g = GoodputStatus {
            run: "run-x".into(),
            wall_s: seconds.wall(),
            seconds,
            lost_s: seconds.badput(),
            goodput: seconds.goodput(),
            goodput_24h: None,
            interruptions: BTreeMap::new(),
            mtbf_s: None,
            mttr_s: None,
            save_cost_s: None,
            checkpoint: None,
            step_time: None,
            updated_at: String::new(),
        };
        assert_eq!(
            g.line(),
            "goodput 94.0 % · lost 38 min: rework 21 · hang 9 · restore 5 · startup 3"
        );
    }
}
