//! What the worker tells the daemon: `heartbeat.json` and `events.jsonl`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use lavender::events::{self, Event, kind as kinds};
use lavender::failure::Failure;
use lavender::heartbeat::{self, Heartbeat, WorkerState};

use super::eta::EtaEstimator;

/// Weight of the newest loss in `loss_smooth`.
const EMA_ALPHA: f64 = 0.1;
/// The ETA's speed window (seconds).
const ETA_WINDOW_S: f64 = 120.0;

pub struct Reporter {
    run_dir: PathBuf,
    started: Instant,
    eta: EtaEstimator,
    /// A step was trained by this process: a phase ends in `training`, not `starting`.
    trained: bool,
    pub hb: Heartbeat,
}

impl Reporter {
    pub fn new(run_dir: PathBuf, total_steps: u64) -> Reporter {
        Reporter {
            run_dir,
            started: Instant::now(),
            eta: EtaEstimator::new(ETA_WINDOW_S, 5),
            trained: false,
            hb: Heartbeat::new(0, total_steps, "", WorkerState::Starting),
        }
    }

    /// A reporter that continues the run's last heartbeat (for the failure report of
    /// a trainer that is gone), or starts afresh when there is none.
    pub fn continuing(run_dir: PathBuf) -> Reporter {
        let last = heartbeat::read(&heartbeat::path(&run_dir)).ok();
        let mut r = Reporter::new(run_dir, last.as_ref().map_or(0, |hb| hb.total_steps));
        if let Some(mut hb) = last {
            hb.pid = std::process::id();
            r.hb = hb;
        }
        r
    }

    /// Records a finished optimizer step (no file I/O).
    pub fn step_done(&mut self, step: u64, loss: f64, lr: f64, grad_norm: f64) {
        self.trained = true;
        self.hb.step = step;
        self.hb.loss = Some(loss);
        self.hb.lr = Some(lr);
        self.hb.grad_norm = Some(grad_norm);
        if loss.is_finite() {
            self.hb.loss_smooth = Some(match self.hb.loss_smooth {
                Some(s) => s + EMA_ALPHA * (loss - s),
                None => loss,
            });
        }
        self.eta.observe(step, self.started.elapsed().as_secs_f64());
        self.hb.steps_per_sec = self.eta.steps_per_sec();
        self.hb.eta_seconds = self
            .eta
            .eta_seconds(self.hb.total_steps)
            .map(|s| s.round() as u64);
    }

    /// Marks where the run resumes, so speed is measured from here.
    pub fn resumed_at(&mut self, step: u64) {
        self.hb.step = step;
        self.eta.observe(step, self.started.elapsed().as_secs_f64());
    }

    pub fn remaining_hours(&self) -> Option<f64> {
        self.hb.eta_seconds.map(|s| s as f64 / 3600.0)
    }

    pub fn write(&mut self) -> Result<()> {
        self.hb.timestamp = lavender::time::rfc3339_z(lavender::time::now_utc());
        heartbeat::write(&self.run_dir, &self.hb)?;
        Ok(())
    }

    /// Changes state and writes the heartbeat at once.
    pub fn set_state(&mut self, state: WorkerState) -> Result<()> {
        self.hb.state = state;
        if state == WorkerState::Finished {
            self.hb.eta_seconds = Some(0);
        }
        self.write()
    }

    /// Enters a phase that holds training (`loading`, `evaluating`, `saving`): the
    /// heartbeat says so at once, so the daemon's allowance for it starts now.
    pub fn phase(&mut self, state: WorkerState) -> Result<()> {
        self.set_state(state)
    }

    /// Leaves a phase: back to `training`, or to `starting` before this process
    /// trained its first step, with a heartbeat that starts the next allowance.
    pub fn end_phase(&mut self) -> Result<()> {
        self.set_state(if self.trained {
            WorkerState::Training
        } else {
            WorkerState::Starting
        })
    }

    /// The last heartbeat (`failed`, with why) and the `failed` event.
    pub fn failed(&mut self, failure: &Failure) -> Result<()> {
        self.hb.failure = Some(failure.clone());
        let state = self.set_state(WorkerState::Failed);
        let event = self.event(
            Event::new(kinds::FAILED, failure.message.clone())
                .with("failure", failure)
                .with("step", failure.step.unwrap_or(self.hb.step)),
        );
        state.and(event)
    }

    pub fn event(&self, event: Event) -> Result<()> {
        events::append(&self.run_dir, &event)?;
        Ok(())
    }
}
