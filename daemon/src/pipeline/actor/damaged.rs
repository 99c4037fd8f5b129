//! A damaged checkpoint set aside and the run resumed from the one before
//! (`lavender::checkpoint::fallback` makes the choice). Every training launch with a
//! checkpoint to resume from checks it first, on the blocking pool with the launch:
//! the newest candidate that verifies (or has no manifest) is taken, each damaged
//! one moved to `<run>/damaged/<name>/`. A worker that cannot load its checkpoint
//! (`damaged_checkpoint`) has it set aside the same way and is restarted at once:
//! neither is a crash restart, nor a retry of the same bytes. With nothing intact
//! left, the launch fails naming each one set aside.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lavender::checkpoint::contents::Verdict;
use lavender::checkpoint::fallback::{self, Candidates, OnDamage, SetAside};
use lavender::config::PipelineStep;
use lavender::events::{self, Event as RunEvent, kind};
use lavender::failure::{Failure, FailureKind};
use lavender::pipeline_file::RecordEvent;

use super::Actor;
use crate::alert::{Alert, AlertSender};
use crate::exit::ExitOutcome;
use crate::pipeline::machine::{
    Crash, Event, LiveWorker, PendingRestart, Phase, Relaunch, Restart,
};
use crate::pipeline::plan;
use crate::process::SpawnSpec;

/// What a training launch checks before it starts the worker.
pub(super) struct ResumeCheck {
    candidates: Candidates,
    /// `supervisor.verdict_max_age_s`: a recorded "verified" this young, on files
    /// unchanged since, is taken without reading every byte again.
    verdict_max_age: Duration,
    /// Observe mode: a damaged candidate is left in place, said as would-have.
    on_damage: OnDamage,
    /// A checkpoint set aside before this launch (the worker could not load it): with
    /// nothing else intact, the failure names it too.
    earlier: Option<String>,
    /// A relaunch (no operator at hand) waits this long for a checkpoint the storage
    /// cannot read; a start (`None`) is refused at once, naming it.
    storage_wait: Option<StorageWait>,
}

/// How a relaunch waits for its storage.
pub(super) struct StorageWait {
    /// `supervisor.storage_error_wait_s`.
    limit: Duration,
    step: PipelineStep,
    alerts: AlertSender,
    /// The launch this check is for, and the last launch a stop abandoned: a wait
    /// ends as soon as they are equal.
    generation: u64,
    abandoned: Arc<AtomicU64>,
}

impl StorageWait {
    fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed) >= self.generation
    }

    /// Sleeps `wait` unless the launch is abandoned first (checked every 100 ms);
    /// false when it was.
    fn sleep(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if self.abandoned() {
                return false;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
        }
        !self.abandoned()
    }
}

/// What the check found, reported back with the launch.
pub(super) struct Checked {
    /// The checkpoint taken and its step.
    chosen: Option<(PathBuf, u64)>,
    verdict: Option<Verdict>,
    set_aside: Vec<SetAside>,
    /// Why the worker was not launched: nothing intact to resume from.
    pub refusal: Option<String>,
}

impl ResumeCheck {
    /// The walk over the candidates; a relaunch whose walk meets a storage error walks
    /// again after a backoff while the storage wait lasts (one alert, at the first).
    /// Also how long it waited, when it did.
    fn resolve(&self) -> lavender::Result<(fallback::Resolved, Option<Duration>)> {
        let check = lavender::checkpoint::verdicts::check_reusing(self.verdict_max_age);
        let began = Instant::now();
        let mut tries = 0u32;
        loop {
            let resolved = fallback::resolve(&self.candidates, &check, self.on_damage)?;
            let waited = (tries > 0).then(|| began.elapsed());
            let (Some(error), Some(wait)) = (&resolved.storage_error, &self.storage_wait) else {
                if waited.is_some() {
                    tracing::info!(
                        "the storage reads again after {:.0} s: the relaunch goes on",
                        began.elapsed().as_secs_f64()
                    );
                }
                return Ok((resolved, waited));
            };
            let left = wait.limit.saturating_sub(began.elapsed());
            if left.is_zero() {
                return Ok((resolved, waited));
            }
            let next = crate::backoff::Backoff::storage()
                .before(tries + 1)
                .min(left);
            if tries == 0 {
                let message = format!(
                    "{error}: a storage error, not damage; nothing is set aside and every checkpoint is kept; reading it again with a backoff for up to {} s (supervisor.storage_error_wait_s)",
                    wait.limit.as_secs()
                );
                tracing::warn!(step = %wait.step, "{message}");
                let _ = wait.alerts.send(Alert::StorageError {
                    step: wait.step,
                    message,
                });
            } else {
                tracing::info!(step = %wait.step, "still unreadable: {error}; again in {} s", next.as_secs());
            }
            tries += 1;
            if !wait.sleep(next) {
                return Ok((resolved, waited));
            }
        }
    }

    /// Walks the candidates (reading every byte of the one taken, unless its verdict
    /// still holds), sets `spec`'s
    /// resume to the checkpoint taken. Runs on the blocking pool.
    pub(super) fn run(self, spec: &mut SpawnSpec) -> Checked {
        let (resolved, waited) = match self.resolve() {
            Ok(r) => r,
            Err(e) => {
                return Checked {
                    chosen: None,
                    verdict: None,
                    set_aside: Vec::new(),
                    refusal: Some(format!("cannot check the checkpoints to resume from: {e}")),
                };
            }
        };
        let mut checked = Checked {
            chosen: resolved
                .chosen
                .as_ref()
                .map(|c| (c.path.clone(), c.state.step)),
            verdict: resolved.verdict,
            set_aside: resolved.set_aside,
            refusal: None,
        };
        spec.resume = checked.chosen.as_ref().map(|(p, _)| p.clone());
        if let Some(error) = resolved.storage_error {
            let waited = waited.map_or_else(String::new, |w| {
                format!(
                    " (still, after {:.0} s of trying again: supervisor.storage_error_wait_s)",
                    w.as_secs_f64()
                )
            });
            checked.refusal = Some(format!(
                "a storage error, not damage: {error}{waited}; nothing was set aside and every checkpoint is kept; when the storage reads again, start again with --resume latest"
            ));
            return checked;
        }
        // Only a run with nothing saved yet, started from nothing, trains from step 0.
        let named = match &self.candidates {
            Candidates::None | Candidates::Run { then: None, .. } => None,
            Candidates::Exact(p) | Candidates::UpTo { target: p, .. } => Some(p),
            Candidates::Run { then: Some(p), .. } => Some(p),
        };
        if checked.chosen.is_none()
            && (named.is_some() || !checked.set_aside.is_empty() || self.earlier.is_some())
        {
            let mut each: Vec<String> = self.earlier.into_iter().collect();
            each.extend(checked.set_aside.iter().map(ToString::to_string));
            if each.is_empty()
                && let Some(p) = named
            {
                each.push(format!("{} is gone", p.display()));
            }
            checked.refusal = Some(format!(
                "no intact checkpoint is left to resume from: {}",
                each.join("; ")
            ));
        }
        checked
    }
}

impl Actor {
    /// The check the launch of the worker now launching makes; `None` for a step
    /// that resumes from nothing.
    pub(super) fn resume_check(&self, step: PipelineStep) -> Option<ResumeCheck> {
        let Phase::Launching { launch, .. } = &self.phase else {
            return None;
        };
        let candidates =
            plan::resume_candidates(&self.layout, &self.record, step, launch.after_crash());
        let earlier = match &launch.relaunch {
            Some(Relaunch::Restart(Restart {
                why: Some(PendingRestart::Failed(f)),
                ..
            })) if f.kind == FailureKind::DamagedCheckpoint => Some(f.message.clone()),
            _ => None,
        };
        // Nothing is moved in observe mode, nor a `--resume PATH` outside the data
        // root (a folder of the user's, not the daemon's to rearrange).
        let outside = match &candidates {
            Candidates::Exact(p) => !p.starts_with(&self.layout.data_root),
            _ => false,
        };
        let on_damage = if self.observing() || outside {
            OnDamage::Leave
        } else {
            OnDamage::SetAside
        };
        // A relaunch has no operator at hand: it waits for a storage error to clear.
        let storage_wait = launch.after_crash().then(|| StorageWait {
            limit: Duration::from_secs(self.config.supervisor.storage_error_wait_s),
            step,
            alerts: self.alerts.clone(),
            generation: launch.generation,
            abandoned: self.abandoned_launch.clone(),
        });
        // After a worker could not load its checkpoint, or ended without training
        // past it, what it read is read again whatever a verdict says (a storage
        // error, which no `stat` shows, fails the worker's load however it names it).
        let verdict_max_age = if earlier.is_some() || self.record.no_progress_restarts > 0 {
            Duration::ZERO
        } else {
            Duration::from_secs(self.config.supervisor.verdict_max_age_s)
        };
        (candidates != Candidates::None || earlier.is_some()).then_some(ResumeCheck {
            candidates,
            verdict_max_age,
            storage_wait,
            on_damage,
            earlier,
        })
    }

    /// The check of launch `generation` is back: each checkpoint set aside is told,
    /// and the launch resumes from the one taken.
    pub(super) fn on_checked(&mut self, generation: u64, checked: Checked) {
        let step = PipelineStep::Train;
        let next = match &checked.chosen {
            Some((path, _)) => format!("resuming from {}", plan_name(path)),
            None if checked.refusal.is_some() => "no intact checkpoint is left".to_string(),
            None => "training starts at step 0".to_string(),
        };
        for s in &checked.set_aside {
            self.tell_set_aside(step, s, &next);
        }
        if let Some((path, _)) = &checked.chosen {
            match &checked.verdict {
                Some(Verdict::Verified { files, bytes }) => tracing::info!(
                    "resuming from {}: verified ({files} files, {bytes} bytes read back against its manifest)",
                    path.display()
                ),
                _ => tracing::info!(
                    "resuming from {}: unverified (no manifest.json to check it against)",
                    path.display()
                ),
            }
        }
        let Phase::Launching { launch, .. } = &mut self.phase else {
            return;
        };
        if launch.generation != generation {
            return;
        }
        let chosen = checked.chosen.as_ref().map(|(p, _)| p.clone());
        if launch.resume == chosen {
            return;
        }
        launch.resume = chosen.clone();
        launch.resumed_from_step = launch
            .resumed_from_step
            .map(|_| checked.chosen.as_ref().map_or(0, |(_, s)| *s));
        // A start resumes from another checkpoint than it named: the record and the
        // run's lineage say the one it took.
        if launch.relaunch.is_none() {
            self.record.apply(RecordEvent::ResumeFrom(chosen.clone()));
            if let (Some(run), Some(from)) = (&self.record.run_dir, &chosen)
                && let Err(e) = lavender::run::record_parent(run, from)
            {
                tracing::error!("{e}");
            }
        }
    }

    /// The training worker ended with `damaged_checkpoint`: a checkpoint it was given
    /// that has no manifest is set aside on its word and it is restarted at once (a
    /// walk back at the launch). False (the policy then decides, and counts it) when
    /// it was given none, in observe mode, or when the checkpoint has a manifest: the
    /// relaunch's check reads it back and sets it aside if its bytes are damaged; if
    /// they are intact the cause was elsewhere (a data file read while loading), and
    /// the same failure repeated ends the run with every checkpoint kept.
    pub(super) fn fall_back(
        &mut self,
        worker: &LiveWorker,
        failure: &Failure,
        outcome: ExitOutcome,
    ) -> bool {
        if self.observing() {
            return false;
        }
        let after_crash = worker.resumed_from_step.is_some();
        let Some(ckpt) = plan::launch_resume(&self.record, worker.step, after_crash) else {
            return false;
        };
        if ckpt.join(lavender::checkpoint::contents::FILE).exists() {
            return false;
        }
        let s = match fallback::set_aside(&ckpt, failure.message.clone()) {
            Ok(s) => s,
            Err(e) => {
                let reason = format!("{}; it cannot be set aside: {e}", failure.message);
                self.fail_after(worker.step, reason, Some(outcome), Some(failure.clone()));
                return true;
            }
        };
        self.tell_set_aside(worker.step, &s, "restarting from the one before");
        // Said once the worker runs again, and named if nothing intact is left.
        let failure = Failure {
            message: s.to_string(),
            ..failure.clone()
        };
        self.on(Event::RestartDecided {
            delay: Duration::ZERO,
            restart: Restart {
                why: Some(PendingRestart::Failed(failure)),
                last_exit: Some(outcome),
            },
            crash: Some(Crash {
                error: s.to_string(),
                restarts: None,
                rolled_back: None,
            }),
        });
        self.commit();
        true
    }

    /// The log line, the `checkpoint_damaged` event in the run and the alert.
    fn tell_set_aside(&self, step: PipelineStep, s: &SetAside, next: &str) {
        let message = format!("{s}; {next}");
        tracing::warn!(%step, "{message}");
        if let Some(run) = &self.record.run_dir {
            let event = RunEvent::new(kind::CHECKPOINT_DAMAGED, message.clone())
                .with("checkpoint", &s.name)
                .with("moved_to", &s.moved_to)
                .with("moved", s.moved)
                .with("reason", &s.reason);
            if let Err(e) = events::append(run, &event) {
                tracing::error!("{e}");
            }
        }
        self.set_aside_decided(step, s, next);
        self.alert(Alert::CheckpointDamaged { step, message });
    }
}

fn plan_name(path: &std::path::Path) -> String {
    super::restart::checkpoint_text(Some(path))
}
