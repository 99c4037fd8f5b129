//! The replay check. A worker resumed from a checkpoint trains again the steps
//! between that checkpoint and where its run had got to: the same steps, on the same
//! data, whose values are already in the run's per-step record
//! ([`crate::log_history::SIDECAR`], one JSON line a step). A checkpoint that resumes
//! the run gives them again (`lavender-worker` on the CPU bit for bit; elsewhere
//! within a relative tolerance); one that does not (a data cursor, an RNG or a
//! scheduler not restored) gives other values, and the first step that differs is
//! where the resume went wrong.
//!
//! Before a relaunch the daemon keeps the steps past the checkpoint ([`Replay`],
//! `state/replay/<run>.json`, so a daemon restart loses nothing) and cuts the record
//! back to the checkpoint; every line past it after that is the new worker's, and
//! [`Replay::observe`] checks it against the kept one. Steps retrained after a
//! rollback are new data, not a replay: no [`Replay`] is kept for them.
//!
//! Every line is untrusted: a line that is not a step entry is skipped, never an
//! error; a record is read at most [`MAX_READ`] bytes at a time.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{IoContext, Result};

/// One writer of the checks at a time in this process: a keep and the watcher's
/// writes of the check it follows never cross.
static WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The most bytes one [`read_from`] reads (the rest waits for the next call).
pub const MAX_READ: u64 = 16 << 20;

/// The most steps kept for one replay: a record longer than that past its
/// checkpoint keeps the first of them (the steps a resume trains first).
pub const MAX_STEPS: usize = 100_000;

/// `state/replay/`, one file per run.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("replay")
}

/// `state/replay/<run>.json`; `None` for a run name that is not a plain file name.
pub fn path(state_dir: &Path, run: &str) -> Option<PathBuf> {
    let plain = !run.is_empty()
        && run.len() <= 200
        && !run.starts_with('.')
        && run
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    plain.then(|| dir(state_dir).join(format!("{run}.json")))
}

/// What one `stat` of a check's file says: inode, size, modification time (each
/// write makes a new inode): a reader tells its own write from another's by it.
pub type Stat = (u64, u64, std::time::SystemTime);

/// The [`Stat`] of `run`'s check file; `None` without one.
pub fn stat(state_dir: &Path, run: &str) -> Option<Stat> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path(state_dir, run)?).ok()?;
    Some((md.ino(), md.len(), md.modified().ok()?))
}

/// One training step's values as the record has them (Hugging Face's key names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainStepValues {
    pub step: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// `None`: not a number (JSON has no NaN: the writers write `null`).
    pub loss: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_rate: Option<f64>,
    /// The steps the loss is the mean of, ending at `step` (the Hugging Face
    /// Trainer logs a mean over `logging_steps`); `None`: the step's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
}

impl TrainStepValues {
    /// A training entry of the record (it has `step` and `loss`); evaluations,
    /// torn lines and anything else are `None`.
    pub fn parse(line: &str) -> Option<TrainStepValues> {
        let Value::Object(entry) = serde_json::from_str::<Value>(line).ok()? else {
            return None;
        };
        let step = entry.get("step")?.as_u64()?;
        let number = |key: &str| -> Option<Option<f64>> {
            match entry.get(key) {
                None | Some(Value::Null) => Some(None),
                Some(Value::Number(n)) => n.as_f64().map(Some),
                Some(_) => None,
            }
        };
        if !entry.contains_key("loss") {
            return None;
        }
        let stage = match entry.get("stage") {
            Some(Value::String(s)) if s.len() <= 64 => Some(s.clone()),
            None | Some(Value::Null) => None,
            Some(_) => return None,
        };
        let window = match entry.get("window") {
            None | Some(Value::Null) => None,
            Some(w) => Some(w.as_u64().filter(|w| *w >= 1 && *w <= step)?),
        };
        Some(TrainStepValues {
            step,
            window,
            stage,
            loss: number("loss")?,
            grad_norm: number("grad_norm")?,
            learning_rate: number("learning_rate")?,
        })
    }
}

/// The step entries of the record at `path` from byte `offset` on, and the offset
/// after the last whole line read (a line still being written waits). A missing
/// record has none. A record shorter than `offset` was written anew: read from 0.
pub fn read_from(path: &Path, offset: u64) -> Result<(Vec<TrainStepValues>, u64)> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e).ctx("open per-step record", path),
    };
    let len = file.metadata().ctx("read per-step record", path)?.len();
    let offset = if len < offset { 0 } else { offset };
    file.seek(SeekFrom::Start(offset))
        .ctx("read per-step record", path)?;
    let mut bytes = Vec::new();
    file.take(MAX_READ)
        .read_to_end(&mut bytes)
        .ctx("read per-step record", path)?;
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let steps = String::from_utf8_lossy(&bytes[..whole])
        .lines()
        .filter_map(TrainStepValues::parse)
        .collect();
    Ok((steps, offset + whole as u64))
}

/// How close a replayed value must be to the first one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tolerance {
    /// Bit for bit.
    Exact,
    /// `|a - b| <= r * max(|a|, |b|)`.
    Relative(f64),
}

impl Tolerance {
    /// Whether `again` is `first` within the tolerance (two missing values agree;
    /// a missing one and a number do not).
    pub fn agrees(self, first: Option<f64>, again: Option<f64>) -> bool {
        match (first, again) {
            (None, None) => true,
            (Some(a), Some(b)) => match self {
                Tolerance::Exact => a.to_bits() == b.to_bits(),
                Tolerance::Relative(r) => a == b || (a - b).abs() <= r * a.abs().max(b.abs()),
            },
            _ => false,
        }
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tolerance::Exact => write!(f, "exact"),
            Tolerance::Relative(r) => write!(f, "relative {r}"),
        }
    }
}

/// `|a - b| / max(|a|, |b|)` (0 for two equal values, 1 for a missing one).
pub fn relative_difference(first: Option<f64>, again: Option<f64>) -> f64 {
    match (first, again) {
        (None, None) => 0.0,
        (Some(a), Some(b)) if a == b => 0.0,
        (Some(a), Some(b)) => {
            let d = (a - b).abs() / a.abs().max(b.abs());
            if d.is_finite() { d } else { 1.0 }
        }
        _ => 1.0,
    }
}

/// The first replayed value that is not the first pass's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    pub step: u64,
    /// `loss`, `grad_norm` or `learning_rate`.
    pub key: String,
    pub first: Option<f64>,
    pub again: Option<f64>,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: Option<f64>| v.map_or("NaN".to_string(), |v| v.to_string());
        write!(
            f,
            "step {} {} {} vs {}",
            self.step,
            self.key,
            show(self.first),
            show(self.again)
        )
    }
}

/// Where the check of one resume stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Replayed steps are still to come.
    Checking,
    /// Every kept step came again, within the tolerance.
    Passed,
    /// A replayed step differs ([`Replay::mismatch`]).
    Mismatch,
    /// The worker ended before replaying every kept step; those it did agreed.
    Incomplete,
}

/// One resume's check: the steps kept past its checkpoint and how the worker's
/// replay of them compares so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    /// The run's directory name.
    pub run: String,
    /// The checkpoint resumed from (its directory name) and its step.
    pub checkpoint: String,
    pub from_step: u64,
    pub tolerance: Tolerance,
    /// The first pass's steps past `from_step`, by step.
    pub expected: BTreeMap<u64, TrainStepValues>,
    /// Steps compared so far (each once).
    pub checked: u64,
    /// The largest relative difference seen.
    pub largest_difference: f64,
    pub verdict: Verdict,
    pub mismatch: Option<Mismatch>,
    /// Steps checked by the run's earlier resumes.
    #[serde(default)]
    pub checked_before: u64,
    /// Which keep this check is (a time and the keeper's pid): a writer holding an
    /// older one writes nothing over a newer ([`Replay::write_if_current`]).
    #[serde(default)]
    pub kept: String,
}

impl Replay {
    /// The check of a resume from `checkpoint` (at `from_step`) of a run whose
    /// record holds `record` (in file order: a step written twice keeps its last).
    pub fn new(
        run: &str,
        checkpoint: &str,
        from_step: u64,
        tolerance: Tolerance,
        record: impl IntoIterator<Item = TrainStepValues>,
    ) -> Replay {
        let mut expected = BTreeMap::new();
        for v in record.into_iter().filter(|v| v.step > from_step) {
            if expected.len() < MAX_STEPS || expected.contains_key(&v.step) {
                expected.insert(v.step, v);
            }
        }
        let verdict = if expected.is_empty() {
            Verdict::Passed
        } else {
            Verdict::Checking
        };
        Replay {
            run: run.to_string(),
            checkpoint: checkpoint.to_string(),
            from_step,
            tolerance,
            expected,
            checked: 0,
            largest_difference: 0.0,
            verdict,
            mismatch: None,
            checked_before: 0,
            kept: String::new(),
        }
    }

    /// Compares one replayed step (a step kept and not yet checked; any other is
    /// new training, or a line already seen). Returns the mismatch it found.
    pub fn observe(&mut self, again: &TrainStepValues) -> Option<&Mismatch> {
        if self.verdict != Verdict::Checking {
            return None;
        }
        let first = self.expected.remove(&again.step)?;
        // A mean over a window compares only with the mean over the same steps: a
        // window begun before the checkpoint held steps the replay does not train.
        if first.window != again.window
            || first
                .window
                .is_some_and(|w| again.step - w < self.from_step)
        {
            if self.expected.is_empty() {
                self.verdict = Verdict::Passed;
            }
            return None;
        }
        self.checked += 1;
        // The loss always; the gradient norm and the rate where both passes say them.
        let pairs = [
            ("loss", first.loss, again.loss, true),
            ("grad_norm", first.grad_norm, again.grad_norm, false),
            (
                "learning_rate",
                first.learning_rate,
                again.learning_rate,
                false,
            ),
        ];
        for (key, a, b, always) in pairs {
            if !always && (a.is_none() || b.is_none()) {
                continue;
            }
            self.largest_difference = self.largest_difference.max(relative_difference(a, b));
            if !self.tolerance.agrees(a, b) {
                self.verdict = Verdict::Mismatch;
                self.mismatch = Some(Mismatch {
                    step: again.step,
                    key: key.to_string(),
                    first: a,
                    again: b,
                });
                return self.mismatch.as_ref();
            }
        }
        if self.expected.is_empty() {
            self.verdict = Verdict::Passed;
        }
        None
    }

    /// The worker ended: a check still waiting for steps is incomplete.
    pub fn ended(&mut self) {
        if self.verdict == Verdict::Checking {
            self.verdict = Verdict::Incomplete;
        }
    }

    /// The status's `training.replay`.
    pub fn status(&self) -> ReplayStatus {
        ReplayStatus {
            checkpoint: self.checkpoint.clone(),
            steps_checked: self.checked_before + self.checked,
            steps_to_check: self.expected.len() as u64,
            largest_difference: self.largest_difference,
            tolerance: self.tolerance.to_string(),
            verdict: self.verdict,
            mismatch: self.mismatch.as_ref().map(ToString::to_string),
        }
    }

    /// Reads the check kept for `run`; `None` when there is none or it does not parse.
    pub fn read(state_dir: &Path, run: &str) -> Option<Replay> {
        let bytes = std::fs::read(path(state_dir, run)?).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes it unless the file now holds another keep (a relaunch kept a newer
    /// check meanwhile); the file's [`stat`] after the write, `None` when it did not.
    pub fn write_if_current(&self, state_dir: &Path) -> Result<Option<Stat>> {
        let _one = WRITES.lock().unwrap_or_else(|p| p.into_inner());
        if Replay::read(state_dir, &self.run).is_some_and(|r| r.kept != self.kept) {
            return Ok(None);
        }
        self.write(state_dir)?;
        Ok(stat(state_dir, &self.run))
    }

    /// Writes it (atomically) under `state_dir`.
    pub fn write(&self, state_dir: &Path) -> Result<()> {
        let Some(path) = path(state_dir, &self.run) else {
            return Ok(());
        };
        std::fs::create_dir_all(dir(state_dir)).ctx("create", dir(state_dir))?;
        crate::atomic::write_json(&path, self)
    }
}

/// `training.replay` in the status: the last resume's check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayStatus {
    /// The checkpoint the last resume started from.
    pub checkpoint: String,
    /// Replayed steps compared in this run (every resume's).
    pub steps_checked: u64,
    /// Kept steps the last resume has still to replay.
    pub steps_to_check: u64,
    /// The largest relative difference seen in the last resume's replay.
    pub largest_difference: f64,
    /// `exact` or `relative R`.
    pub tolerance: String,
    pub verdict: Verdict,
    /// `step S loss A vs B`, when the verdict is a mismatch.
    pub mismatch: Option<String>,
}

impl ReplayStatus {
    /// The status's line: "resumed from C: 40 replayed steps agree (exact)".
    pub fn line(&self) -> String {
        let from = &self.checkpoint;
        let checked = self.steps_checked;
        match self.verdict {
            Verdict::Checking => format!(
                "resumed from {from}: checking, {} step(s) to replay ({}; {checked} agree so far)",
                self.steps_to_check, self.tolerance
            ),
            Verdict::Passed => format!(
                "resumed from {from}: {checked} replayed step(s) agree ({}; largest difference {:.2e})",
                self.tolerance, self.largest_difference
            ),
            Verdict::Incomplete => format!(
                "resumed from {from}: {checked} replayed step(s) agree; the worker ended with {} still to replay",
                self.steps_to_check
            ),
            Verdict::Mismatch => format!(
                "RESUME MISMATCH from {from}: {} ({})",
                self.mismatch
                    .as_deref()
                    .unwrap_or("a replayed step differs"),
                self.tolerance
            ),
        }
    }
}

/// Keeps the check of a resume from `checkpoint` (a directory of `run_dir`) before
/// the worker starts: the record's steps past the checkpoint go to
/// `state/replay/<run>.json` and the record is cut back to the checkpoint, so every
/// line past it is the new worker's. Returns the check kept, or `None` when nothing
/// is replayed (no steps past it, or a rollback's skip applies at it: new data).
pub fn keep(
    state_dir: &Path,
    run_dir: &Path,
    checkpoint: &Path,
    tolerance: Tolerance,
) -> Result<Option<Replay>> {
    let _one = WRITES.lock().unwrap_or_else(|p| p.into_inner());
    let (Some(run), Some(name)) = (file_name(run_dir), file_name(checkpoint)) else {
        return Ok(None);
    };
    let state = crate::trainer_state::read(checkpoint)?;
    let from_step = state.step;
    let record_path = run_dir.join(crate::log_history::SIDECAR);
    let record = read_all(&record_path)?;
    // A rollback's range from this checkpoint not yet in its cursor: the steps past
    // it train other data.
    // A record that cannot be read cannot tell: nothing is kept.
    let Ok(skips) = crate::skips::read(run_dir) else {
        return Ok(None);
    };
    let skipping = skips
        .to_apply(from_step, crate::skips::applied(&state))
        .next()
        .is_some();
    let earlier = Replay::read(state_dir, &run);
    let mut replay = Replay::new(&run, &name, from_step, tolerance, record);
    // A replay cut short (the worker gone in the middle of it) still holds first-pass
    // steps the record no longer has: they come again too.
    if let Some(e) = &earlier {
        for (step, first) in e.expected.range(from_step + 1..) {
            if replay.expected.len() >= MAX_STEPS {
                break;
            }
            replay
                .expected
                .entry(*step)
                .or_insert_with(|| first.clone());
        }
    }
    if skipping {
        replay.expected.clear();
    }
    replay.checked_before = earlier.as_ref().map_or(0, |e| e.checked_before + e.checked);
    if replay.expected.is_empty() {
        // Nothing to compare. An earlier check still waiting is over, and forgets
        // its steps (after a rollback they are another run's).
        if let Some(mut e) = earlier.filter(|e| !e.expected.is_empty()) {
            e.ended();
            e.expected.clear();
            e.write(state_dir)?;
        }
        return Ok(None);
    }
    replay.verdict = Verdict::Checking;
    replay.kept = format!(
        "{}-{}",
        crate::time::rfc3339_z(crate::time::now_utc()),
        std::process::id()
    );
    // The record first: a watcher that sees the check must find no first-pass line
    // past the checkpoint left to take for a replayed one.
    cut_back(&record_path, from_step)?;
    replay.write(state_dir)?;
    Ok(Some(replay))
}

fn file_name(path: &Path) -> Option<String> {
    path.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Every step entry of a record (a long record in [`MAX_READ`] pieces).
pub fn read_all(path: &Path) -> Result<Vec<TrainStepValues>> {
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let (steps, next) = read_from(path, offset)?;
        all.extend(steps);
        if next == offset {
            return Ok(all);
        }
        offset = next;
    }
}

/// Rewrites the record without the lines of steps past `step` (evaluations too)
/// and without a torn last line; lines that are not entries are kept.
pub fn cut_back(path: &Path, step: u64) -> Result<()> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).ctx("read per-step record", path),
    };
    let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut kept = Vec::with_capacity(whole);
    for line in text[..whole].split_inclusive(|&b| b == b'\n') {
        let past = serde_json::from_slice::<Value>(line)
            .ok()
            .and_then(|v| v.get("step").and_then(Value::as_u64))
            .is_some_and(|s| s > step);
        if !past {
            kept.extend_from_slice(line);
        }
    }
    crate::atomic::write_file(path, &kept)
}

#[cfg(test)]
mod tests;
