//! Alerts: what an operator must hear about, raised by the pipeline actor (crash,
//! failure, finish) and the status watchdog (stall, recovery, disk low). One type
//! from detection to delivery: the sink (`push/sink.rs`) logs each one and queues
//! its pushes (`push::pushes` renders them) on the configured channels. A leaf:
//! every layer that raises, streams or delivers alerts imports it from here.

use std::path::PathBuf;
use std::time::Duration;

use lavender::config::PipelineStep;
use lavender::failure::{Failure, FailureKind};
use lavender::status::RecoveryReason;
use tokio::sync::mpsc;

use crate::exit::ExitOutcome;

/// How a crash restart's counts stand, so a push never says "restart 1/3" forever
/// while the same failure repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repeats {
    /// Workers in a row that ended with this same failure, this one included.
    pub same_failure: u32,
    /// `supervisor.max_same_failure`: the pipeline fails at this many.
    pub max_same_failure: u32,
    /// The restart count started afresh: the worker ran longer than
    /// `supervisor.restart_reset_after_s`.
    pub count_reset: bool,
}

impl std::fmt::Display for Repeats {
    /// Empty when there is nothing to add to "restart N/M".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.count_reset {
            write!(
                f,
                " (the count started afresh: the worker ran longer than supervisor.restart_reset_after_s)"
            )?;
        }
        if self.same_failure > 1 {
            write!(
                f,
                "; the same failure {} times in a row, the pipeline fails at {} (supervisor.max_same_failure)",
                self.same_failure, self.max_same_failure
            )?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Alert {
    /// A step died without being asked to; a restart follows after `restart_in`.
    Crashed {
        step: PipelineStep,
        outcome: ExitOutcome,
        /// Why, as the worker said (or its exit code did).
        failure: Failure,
        restart: u32,
        max_restarts: u32,
        restart_in: Duration,
        /// The worker's log, quoted in the push.
        log_file: Option<PathBuf>,
        /// How the counts that end restarting stand.
        repeats: Repeats,
    },
    /// A failure that will repeat, restarts exhausted or without progress, or a
    /// worker that cannot start: the pipeline stopped. `reason` names the cause
    /// and, for a failure that will repeat, the fix.
    Failed {
        step: PipelineStep,
        reason: String,
        restarts: u32,
        last_exit: Option<ExitOutcome>,
        /// The last worker's failure, when one ended the pipeline.
        failure: Option<Failure>,
    },
    /// A worker that stopped beating was killed and restarted (`on_stall: restart`).
    /// `message`: "hung at step N for M; restarted from <checkpoint>".
    HungRestarted { step: PipelineStep, message: String },
    /// A node of the step's Slurm job was lost; the job waits for nodes again (or,
    /// with `on_node_failure: fail`, was cancelled). `message`: "node n2 lost at step
    /// N; waiting for 2 nodes".
    NodeLost { step: PipelineStep, message: String },
    /// The loss diverged and the run went back to the checkpoint before it,
    /// skipping the data that led to it (`on_diverged: rollback`). `message`:
    /// "diverged at step N (…): rolled back to <checkpoint> (step C), skipping …".
    RolledBack {
        step: PipelineStep,
        message: String,
        rollback: usize,
        max_rollbacks: u32,
    },
    /// A checkpoint that failed its check before a resume, or that the worker could
    /// not load, was moved to `<run>/damaged/<name>/`; the run resumes from the one
    /// before. `message` names it and what was wrong.
    CheckpointDamaged { step: PipelineStep, message: String },
    /// The checkpoint a relaunch resumes from cannot be read at all (EIO, ESTALE,
    /// EACCES): not damage; nothing is set aside, and the relaunch reads it again with
    /// a backoff (`supervisor.storage_error_wait_s`). `message` names the file and
    /// what the storage said.
    StorageError { step: PipelineStep, message: String },
    /// A resumed worker's replayed step differs from the first pass's
    /// (`lavender::replay`): the checkpoint does not resume the run. `message` names
    /// the checkpoint, the step and both values.
    ResumeMismatch { step: PipelineStep, message: String },
    /// A restore drill (`supervisor.drill`) found a checkpoint that does not resume
    /// the run; `message` names it, the step and both values. Once per checkpoint.
    DrillFailed { message: String },
    /// The daemon's start resumed a pipeline interrupted by its previous exit or a
    /// power loss (`supervisor.resume_on_start`).
    Resumed {
        step: PipelineStep,
        reason: RecoveryReason,
        message: String,
    },
    /// No heartbeat within the allowance of the worker's phase (`stale_after_s`
    /// while training), and `supervisor.on_stall: alert`.
    Stale {
        step: PipelineStep,
        age_s: Option<u64>,
        stale_after_s: u64,
        training_step: Option<u64>,
    },
    /// A fresh heartbeat after a stale one, or from a worker brought back after a
    /// crash.
    Recovered {
        step: PipelineStep,
        /// How long the heartbeat was stale; `None`: no stall, a worker brought back
        /// after a crash (that incident's end is [`Alert::IncidentOver`]).
        stalled_for: Option<Duration>,
        training_step: Option<u64>,
    },
    /// An incident the daemon handled by itself is over: the worker it brought
    /// back trained past the step it resumed from (the decision log's outcome).
    /// `after`: since the incident's first decision; `lost`: about how much
    /// training time it cost (that span and the steps trained again).
    IncidentOver {
        step: PipelineStep,
        training_step: u64,
        after: Duration,
        lost: Duration,
        attempts: usize,
    },
    /// An incident ended without a push of its own: an operator stopped the
    /// pipeline, or the data step it was about finished. Logged, not pushed; it
    /// closes the push gate so the next failure is pushed again. `text`: how it ended.
    IncidentClosed { text: String },
    /// Every step is done.
    Finished {
        duration: Duration,
        final_loss: Option<f64>,
        final_checkpoint: Option<String>,
        /// The goodput ledger's line for the run (`goodput 94.2 % · lost …`).
        goodput: Option<String>,
    },
    /// Free space on the data root's filesystem fell under `need_bytes`.
    DiskLow {
        path: PathBuf,
        avail_bytes: u64,
        need_bytes: u64,
    },
    /// A save found the disk full (`ENOSPC`, or `EDQUOT` for a quota): the latest
    /// verified checkpoint is as it was and the pipeline waits for space. `message`
    /// names the filesystem, the bytes needed and those free.
    DiskFull { step: PipelineStep, message: String },
    /// Space came back after a [`Alert::DiskFull`]: the worker resumed by itself.
    DiskSpaceBack { step: PipelineStep, message: String },
    /// The next save will not fit even after early retention: "the save due at
    /// step 4,200 needs 480 MB; 310 MB free".
    SaveWontFit { step: PipelineStep, message: String },
    /// Training got slower than its own baseline and stayed so
    /// (`supervisor.slowdown`); `seen`: what the daemon sees of the cause.
    Slowdown {
        stage: String,
        baseline_s: f64,
        current_s: f64,
        for_s: f64,
        seen: String,
    },
    /// The step time is back within `supervisor.slowdown.factor` of its baseline.
    SlowdownRecovered {
        stage: String,
        baseline_s: f64,
        current_s: f64,
    },
    /// The copy off the machine fell behind: the lag passed `replicate.max_lag_s`
    /// or uploads failed `failures` times in a row (`replicate/alarm.rs`).
    ReplicationBehind {
        /// The target URL (never with credentials).
        target: String,
        lag_s: Option<f64>,
        lag_steps: Option<u64>,
        max_lag_s: Option<u64>,
        failures: u32,
        last_error: Option<String>,
    },
    /// The target cannot be opened (no credentials, an unreadable key file) or
    /// refuses the credentials: nothing is copied until an operator acts.
    ReplicationUnavailable {
        /// The target URL (never with credentials).
        target: String,
        reason: String,
    },
    /// Uploads work again and the lag is under `replicate.max_lag_s`.
    ReplicationRecovered {
        target: String,
        /// Since the incident's push.
        after: Duration,
        newest_remote: Option<String>,
        lag_steps: Option<u64>,
    },
    /// A worker outlived a daemon restart and is supervised again.
    Adopted { step: PipelineStep, worker: String },
    /// The worker was stopped by someone else (it saved and exited on SIGTERM).
    StoppedExternally { step: PipelineStep },
}

impl Alert {
    /// Its kind: the feed's `kind`, the push's `kind` (alerts coalesce by it).
    pub fn name(&self) -> &'static str {
        match self {
            Alert::Crashed { .. } => "crashed",
            Alert::Failed { .. } => "failed",
            Alert::HungRestarted { .. } => "hung",
            Alert::NodeLost { .. } => "node_lost",
            Alert::RolledBack { .. } => "rolled_back",
            Alert::CheckpointDamaged { .. } => "checkpoint_damaged",
            Alert::StorageError { .. } => "storage_error",
            Alert::ResumeMismatch { .. } => "resume_mismatch",
            Alert::DrillFailed { .. } => "drill_failed",
            Alert::Resumed { .. } => "resumed",
            Alert::Stale { .. } => "stalled",
            Alert::Recovered { .. } | Alert::IncidentOver { .. } => "recovered",
            Alert::IncidentClosed { .. } => "incident_closed",
            Alert::Finished { .. } => "finished",
            Alert::DiskLow { .. } => "disk_low",
            Alert::DiskFull { .. } => "disk_full",
            Alert::DiskSpaceBack { .. } => "disk_space_back",
            Alert::SaveWontFit { .. } => "save_wont_fit",
            Alert::Slowdown { .. } => "slowdown",
            Alert::SlowdownRecovered { .. } => "slowdown_recovered",
            Alert::ReplicationBehind { .. } => "replication_behind",
            Alert::ReplicationUnavailable { .. } => "replication_unavailable",
            Alert::ReplicationRecovered { .. } => "replication_recovered",
            Alert::Adopted { .. } => "adopted",
            Alert::StoppedExternally { .. } => "stopped_externally",
        }
    }

    /// The pipeline step it is about, if any.
    pub fn step(&self) -> Option<PipelineStep> {
        match self {
            Alert::Crashed { step, .. }
            | Alert::Failed { step, .. }
            | Alert::HungRestarted { step, .. }
            | Alert::NodeLost { step, .. }
            | Alert::RolledBack { step, .. }
            | Alert::CheckpointDamaged { step, .. }
            | Alert::StorageError { step, .. }
            | Alert::ResumeMismatch { step, .. }
            | Alert::Resumed { step, .. }
            | Alert::Stale { step, .. }
            | Alert::Recovered { step, .. }
            | Alert::IncidentOver { step, .. }
            | Alert::Adopted { step, .. }
            | Alert::DiskFull { step, .. }
            | Alert::DiskSpaceBack { step, .. }
            | Alert::SaveWontFit { step, .. }
            | Alert::StoppedExternally { step } => Some(*step),
            Alert::Slowdown { .. }
            | Alert::SlowdownRecovered { .. }
            | Alert::DrillFailed { .. } => Some(PipelineStep::Train),
            Alert::Finished { .. }
            | Alert::IncidentClosed { .. }
            | Alert::DiskLow { .. }
            | Alert::ReplicationBehind { .. }
            | Alert::ReplicationUnavailable { .. }
            | Alert::ReplicationRecovered { .. } => None,
        }
    }
}

impl std::fmt::Display for Alert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Alert::Crashed {
                step,
                outcome,
                failure,
                restart,
                max_restarts,
                restart_in,
                repeats,
                ..
            } => {
                if failure.kind == FailureKind::Crash {
                    write!(f, "step {step} crashed ({outcome})")?;
                } else {
                    write!(
                        f,
                        "step {step} failed ({}: {}; {outcome})",
                        failure.kind, failure.message
                    )?;
                }
                write!(
                    f,
                    "; restart {restart}/{max_restarts} from the latest checkpoint in {:.1}s{repeats}",
                    restart_in.as_secs_f64()
                )
            }
            Alert::Failed { step, reason, .. } => {
                write!(f, "pipeline failed at step {step}: {reason}")
            }
            Alert::Stale { step, age_s, .. } => match age_s {
                Some(age) => write!(f, "step {step}: heartbeat is stale ({age}s old)"),
                None => write!(f, "step {step}: no heartbeat yet after the start-up grace"),
            },
            Alert::HungRestarted { step, message } => write!(f, "step {step}: {message}"),
            Alert::NodeLost { step, message } => write!(f, "step {step}: {message}"),
            Alert::RolledBack { step, message, .. } => write!(f, "step {step}: {message}"),
            Alert::CheckpointDamaged { step, message }
            | Alert::StorageError { step, message }
            | Alert::ResumeMismatch { step, message }
            | Alert::DiskFull { step, message }
            | Alert::DiskSpaceBack { step, message }
            | Alert::SaveWontFit { step, message } => write!(f, "step {step}: {message}"),
            Alert::Resumed { step, message, .. } => write!(f, "step {step}: {message}"),
            Alert::DrillFailed { message } => write!(f, "restore drill: {message}"),
            Alert::Adopted { step, worker } => {
                write!(f, "re-adopted the running worker of step {step} ({worker})")
            }
            Alert::StoppedExternally { step } => {
                write!(
                    f,
                    "step {step} was stopped outside lavenderd (SIGTERM); pipeline stopped"
                )
            }
            Alert::Recovered { step, .. } => write!(f, "step {step}: heartbeat is fresh again"),
            Alert::IncidentOver {
                step,
                training_step,
                after,
                lost,
                attempts,
            } => write!(
                f,
                "step {step}: recovered at step {training_step} after {}; about {} of work lost ({attempts} decision(s), lavenderd incidents)",
                lavender::time::duration(*after),
                lavender::time::duration(*lost)
            ),
            Alert::IncidentClosed { text } => write!(f, "incident over: {text}"),
            Alert::Finished { duration, .. } => {
                write!(f, "pipeline finished after {:.0}s", duration.as_secs_f64())
            }
            Alert::Slowdown {
                stage,
                baseline_s,
                current_s,
                for_s,
                seen,
            } => write!(
                f,
                "training is slower: {current_s:.3} s/step in {stage} against {baseline_s:.3} s/step before ({:.0} % more) for {for_s:.0} s; {seen}",
                (current_s / baseline_s - 1.0) * 100.0
            ),
            Alert::SlowdownRecovered {
                stage,
                baseline_s,
                current_s,
            } => write!(
                f,
                "training is back to speed: {current_s:.3} s/step in {stage} against {baseline_s:.3} s/step before"
            ),
            Alert::ReplicationBehind {
                target,
                lag_s,
                failures,
                last_error,
                ..
            } => {
                write!(f, "replication to {target} is behind")?;
                if let Some(lag) = lag_s {
                    write!(f, ": newest local checkpoint waiting {lag:.0} s")?;
                }
                if *failures > 0 {
                    write!(f, "; {failures} failed attempt(s) in a row")?;
                }
                if let Some(e) = last_error {
                    write!(f, ": {e}")?;
                }
                Ok(())
            }
            Alert::ReplicationUnavailable { target, reason } => write!(
                f,
                "replication to {target} is unavailable, nothing is copied off the machine: {reason}"
            ),
            Alert::ReplicationRecovered { target, after, .. } => write!(
                f,
                "replication to {target} caught up after {}",
                lavender::time::duration(*after)
            ),
            Alert::DiskLow {
                path,
                avail_bytes,
                need_bytes,
            } => write!(
                f,
                "disk low under {}: {avail_bytes} bytes free, {need_bytes} needed",
                path.display()
            ),
        }
    }
}

impl Alert {
    /// False for what is worth hearing but not a problem: the pipeline finished, a
    /// heartbeat recovered, a worker was re-adopted.
    pub fn is_bad_news(&self) -> bool {
        !matches!(
            self,
            Alert::Finished { .. }
                | Alert::Recovered { .. }
                | Alert::IncidentOver { .. }
                | Alert::IncidentClosed { .. }
                | Alert::SlowdownRecovered { .. }
                | Alert::ReplicationRecovered { .. }
                | Alert::Adopted { .. }
                | Alert::Resumed { .. }
                | Alert::DiskSpaceBack { .. }
        )
    }
}

/// Where alerts are sent: the sink, or a tee in front of it.
pub type AlertSender = mpsc::UnboundedSender<Alert>;
