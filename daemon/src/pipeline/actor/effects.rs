//! The executor of the state machine (`pipeline/machine/`): each event the actor
//! hears is stepped through [`step`] with the clock, and the effects it returns are
//! performed here, in order: launches off the actor, signals, the record, alerts.

use nix::sys::signal::Signal;
use tokio::time::Instant;

use super::Actor;
use super::exit::ended;
use crate::alert::Alert;
use crate::pipeline::machine::{Effect, Event, KillReason, PendingRestart, Phase, step};
use crate::process::ExitFuture;

impl Actor {
    /// Steps the machine with `event` and performs what it asks.
    pub(super) fn on(&mut self, event: Event) {
        self.on_with_exit(event, None);
    }

    /// [`Actor::on`] for a launch reported back: `exit` resolves when its worker ends.
    /// The record's changes are applied in memory; the effect or caller that
    /// completes a transition saves and publishes it (`commit`), so the status never
    /// shows half of one (a start is shown running once its first worker runs).
    pub(super) fn on_with_exit(&mut self, event: Event, mut exit: Option<ExitFuture>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Idle);
        let (from, heard) = (phase.name(), event.name());
        let (next, effects) = step(phase, &self.record, event, Instant::now());
        tracing::debug!(
            "pipeline: {from} + {heard} -> {} / {:?}",
            next.name(),
            effects.iter().map(Effect::name).collect::<Vec<_>>()
        );
        self.phase = next;
        for effect in effects {
            self.perform(effect, &mut exit);
        }
    }

    fn perform(&mut self, effect: Effect, exit: &mut Option<ExitFuture>) {
        match effect {
            Effect::Record(change) => {
                self.record.apply(change);
                self.unsaved = true;
            }
            Effect::Launch { generation, spec } => self.launch(generation, spec),
            Effect::Supervise { launch } => match exit.take() {
                Some(exit) => self.install(launch, exit),
                None => tracing::error!(step = %launch.step, "a worker installed without its exit"),
            },
            Effect::SpawnStep { step, start } => self.spawn_step(step, None, start),
            Effect::Resume { step, cause } => self.resume(step, cause),
            Effect::StaysStopped { step, cause } => self.stays_stopped(step, cause),
            Effect::Finished { start } => self.finished(start),
            Effect::Failed {
                step,
                reason,
                last_exit,
                failure,
            } => self.failed(step, reason, last_exit, failure),
            Effect::Cancel { handle } => {
                tracing::info!(worker = %handle, "the pipeline was stopped while this worker was launched; cancelling it");
                self.backend.signal(&handle, Signal::SIGKILL, true);
                if let Some(exit) = exit.take() {
                    tokio::spawn(exit);
                }
            }
            Effect::AnswerStart(start) => self.answer_start(start),
            Effect::Terminate { handle, own_child } => {
                self.backend.signal(&handle, Signal::SIGTERM, own_child);
            }
            Effect::Kill {
                handle,
                own_child,
                reason,
            } => {
                match reason {
                    KillReason::StopTimeout => tracing::warn!(
                        worker = %handle,
                        "the worker did not exit within the stop timeout; SIGKILL"
                    ),
                    KillReason::HungGrace => {
                        tracing::warn!(worker = %handle, "the hung worker is still there; SIGKILL")
                    }
                }
                self.backend.signal(&handle, Signal::SIGKILL, own_child);
            }
            Effect::StopBegun { timeout } => self.stop_begun(timeout),
            Effect::StopWithoutWorker { cancelled, reply } => {
                self.stop_without_worker(cancelled, reply)
            }
            Effect::StopDuringLaunch { step, reply } => self.stop_during_launch(step, reply),
            Effect::Stopped {
                worker,
                stop,
                outcome,
            } => self.stopped(worker, stop, outcome),
            Effect::HungKillBegun { report, grace } => self.hung_kill_begun(&report, grace),
            Effect::QueuedNotHung { handle } => tracing::info!(
                worker = %handle,
                "no heartbeat while the Slurm job is not running: not hung"
            ),
            Effect::Judge {
                worker,
                outcome,
                files,
            } => self.judge_exit(worker, outcome, files),
            Effect::StepDone { step } => self.decisions.step_done(step),
            Effect::StoppedOutside { step } => {
                self.commit();
                self.alert(Alert::StoppedExternally { step });
            }
            Effect::WorkerFailed {
                worker,
                failure,
                outcome,
                last_step,
            } => self.worker_failed(worker, failure, outcome, last_step),
            Effect::HungEnded {
                worker,
                report,
                outcome,
            } => {
                ended(&worker, outcome);
                let last_step = report.step;
                self.restart_after(&worker, PendingRestart::Hung(report), outcome, last_step);
            }
            Effect::RestartDue(restart) => self.on_restart_due(restart),
            Effect::CheckDisk { first } => self.check_disk(first),
            Effect::DiskStillFull { check, first } => self.disk_still_full(check, first),
            Effect::DiskBack {
                check,
                restart,
                told,
            } => self.disk_back(check, restart, told),
            Effect::DiskCheckedRunning(check) => self.disk_checked_running(check),
        }
    }
}
