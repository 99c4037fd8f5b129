//! The push texts of alerts (the one [`Alert`] type, from detection to delivery):
//! stalled, recovered, crashed, restarting, failed, disk low, finished.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

use lavender::time::duration;

use super::format::{bytes, thousands};
use super::message::Notification;
use crate::alert::Alert;
use lavender::failure::FailureKind;

fn step_text(step: Option<u64>) -> String {
    step.map(|s| format!("; last step {}", thousands(s)))
        .unwrap_or_default()
}

/// The pushes `alert` makes, in order, each title starting with `prefix`: a crash
/// is "crashed" (when its exit is known, quoting the last `log_lines` lines of the
/// worker's log) then "restarting"; an adoption or an external stop makes none.
pub fn pushes(alert: &Alert, prefix: &str, log_lines: usize) -> Vec<Notification> {
    let push = |title: String, body: String| {
        Notification::alert(alert.name(), format!("{prefix}{title}"), body)
    };
    match alert {
        Alert::Crashed {
            outcome,
            failure,
            restart,
            max_restarts,
            restart_in,
            log_file,
            repeats,
            ..
        } => {
            let mut out = Vec::new();
            if outcome.is_known() || failure.kind != FailureKind::Crash {
                let tail = log_file
                    .as_deref()
                    .map(|p| log_tail(p, log_lines))
                    .unwrap_or_default();
                let title = if failure.kind == FailureKind::Crash {
                    format!("crashed: {outcome}")
                } else {
                    format!("failed ({}): {}", failure.kind, failure.message)
                };
                out.push(push(
                    title,
                    if tail.is_empty() {
                        "(the worker log is empty)".to_string()
                    } else {
                        tail.join("\n")
                    },
                ));
            }
            out.push(Notification::alert(
                "restarting",
                format!("{prefix}restarting: attempt {restart} of {max_restarts}"),
                if restart_in.is_zero() {
                    format!("resuming from the latest checkpoint now{repeats}")
                } else {
                    format!(
                        "resuming from the latest checkpoint in {}{repeats}",
                        duration(*restart_in)
                    )
                },
            ));
            out
        }
        Alert::Failed {
            step,
            reason,
            restarts,
            last_exit,
            failure,
        } => vec![push(
            match failure {
                // A failure that will repeat: its kind is the news.
                Some(f) if f.kind != FailureKind::Crash => format!("failed: {}", f.kind),
                None if *restarts == 0 && last_exit.is_none() => {
                    format!("failed: step {step} could not run")
                }
                _ => format!(
                    "failed: gave up after {restarts} restart{}",
                    if *restarts == 1 { "" } else { "s" }
                ),
            },
            // The reason names the cause (and, for a failure that will repeat, the fix).
            format!("{reason}; the pipeline is stopped until you start it again"),
        )],
        Alert::HungRestarted { message, .. } => vec![push(
            "hung: the worker was restarted".to_string(),
            message.clone(),
        )],
        Alert::NodeLost { message, .. } => vec![push("node lost".to_string(), message.clone())],
        Alert::RolledBack {
            message,
            rollback,
            max_rollbacks,
            ..
        } => vec![push(
            format!("diverged: rolled back ({rollback}/{max_rollbacks})"),
            message.clone(),
        )],
        Alert::CheckpointDamaged { message, .. } => vec![push(
            "checkpoint damaged: set aside, resuming from the one before".to_string(),
            message.clone(),
        )],
        Alert::StorageError { message, .. } => vec![push(
            "checkpoint unreadable: a storage error; waiting for it, nothing set aside".to_string(),
            message.clone(),
        )],
        Alert::ResumeMismatch { message, .. } => vec![push(
            "resume mismatch: a replayed step differs from the first pass".to_string(),
            message.clone(),
        )],
        Alert::DrillFailed { message } => vec![push(
            "restore drill failed: a checkpoint does not resume the run".to_string(),
            message.clone(),
        )],
        Alert::Resumed { message, .. } => {
            vec![push("resumed by itself".to_string(), message.clone())]
        }
        Alert::Stale {
            age_s,
            stale_after_s,
            training_step,
            ..
        } => vec![push(
            format!(
                "stalled: no heartbeat for {}",
                duration(Duration::from_secs(age_s.unwrap_or(*stale_after_s)))
            ),
            format!(
                "the worker's heartbeat is older than {stale_after_s} s{}",
                step_text(*training_step)
            ),
        )],
        Alert::Recovered {
            stalled_for,
            training_step,
            ..
        } => vec![push(
            "recovered: heartbeat is fresh again".to_string(),
            match stalled_for {
                Some(d) => format!("stalled for {}{}", duration(*d), step_text(*training_step)),
                None => step_text(*training_step)
                    .trim_start_matches("; ")
                    .to_string(),
            },
        )],
        Alert::IncidentOver {
            training_step,
            after,
            lost,
            attempts,
            ..
        } => vec![push(
            format!(
                "recovered at step {} after {}",
                thousands(*training_step),
                duration(*after)
            ),
            format!(
                "about {} of work lost; {attempts} decision(s) by the daemon (lavenderd incidents)",
                duration(*lost)
            ),
        )],
        Alert::DiskLow {
            path,
            avail_bytes,
            need_bytes,
        } => vec![push(
            format!(
                "disk low: {} free, need {}",
                bytes(*avail_bytes),
                bytes(*need_bytes)
            ),
            format!(
                "on {}; the next checkpoint may not fit. Free space or lower training.keep_checkpoints",
                path.display()
            ),
        )],
        Alert::DiskFull { message, .. } => vec![push(
            "disk full: waiting for space".to_string(),
            format!(
                "{message}. The latest verified checkpoint is intact; training resumes by itself once space is freed"
            ),
        )],
        Alert::DiskSpaceBack { message, .. } => vec![push(
            "disk space back: resumed".to_string(),
            message.clone(),
        )],
        Alert::SaveWontFit { message, .. } => vec![push(
            "the next save will not fit".to_string(),
            format!("{message}. Free space or lower training.keep_checkpoints"),
        )],
        Alert::Finished {
            duration: took,
            final_loss,
            final_checkpoint,
            goodput,
        } => {
            let mut parts = Vec::new();
            if let Some(loss) = final_loss.filter(|l| l.is_finite()) {
                parts.push(format!("final loss {loss:.3}"));
            }
            if let Some(name) = final_checkpoint {
                parts.push(format!("final checkpoint {name}"));
            }
            parts.extend(goodput.clone());
            vec![push(
                format!("finished in {}", duration(*took)),
                parts.join(", "),
            )]
        }
        Alert::Slowdown {
            stage,
            baseline_s,
            current_s,
            for_s,
            seen,
        } => vec![push(
            format!(
                "training {:.0} % slower",
                (current_s / baseline_s - 1.0) * 100.0
            ),
            format!(
                "{current_s:.3} s/step in {stage} against {baseline_s:.3} for {}; {seen}",
                duration(Duration::from_secs_f64(*for_s))
            ),
        )],
        Alert::SlowdownRecovered {
            stage,
            baseline_s,
            current_s,
        } => vec![push(
            "training back to speed".to_string(),
            format!("{current_s:.3} s/step in {stage} against {baseline_s:.3}"),
        )],
        Alert::ReplicationBehind {
            target,
            lag_s,
            lag_steps,
            max_lag_s,
            failures,
            last_error,
        } => {
            let mut body = Vec::new();
            if let (Some(lag), Some(steps)) = (lag_s, lag_steps) {
                let limit =
                    max_lag_s.map_or(String::new(), |m| format!(" (replicate.max_lag_s {m})"));
                body.push(format!(
                    "the newest remote checkpoint is {} steps behind; the oldest waiting for {}{limit}",
                    thousands(*steps),
                    duration(Duration::from_secs_f64(lag.max(0.0)))
                ));
            }
            if *failures > 0 {
                body.push(format!("{failures} failed upload attempt(s) in a row"));
            }
            if let Some(e) = last_error {
                body.push(e.clone());
            }
            vec![push(
                format!("replication behind: {target}"),
                body.join("; "),
            )]
        }
        Alert::ReplicationUnavailable { target, reason } => vec![push(
            format!("replication unavailable: {target}"),
            format!("no checkpoint is copied off the machine until this is fixed: {reason}"),
        )],
        Alert::ReplicationRecovered {
            target,
            after,
            newest_remote,
            lag_steps,
        } => {
            let mut body = vec![format!("caught up after {}", duration(*after))];
            if let Some(name) = newest_remote {
                body.push(format!("newest remote checkpoint {name}"));
            }
            if let Some(steps) = lag_steps {
                body.push(format!("{} steps behind", thousands(*steps)));
            }
            vec![push(
                format!("replication caught up: {target}"),
                body.join(", "),
            )]
        }
        // Logged only: an adoption, an operator's own stop or an incident that
        // ended with one needs no push.
        Alert::Adopted { .. } | Alert::StoppedExternally { .. } | Alert::IncidentClosed { .. } => {
            Vec::new()
        }
    }
}

/// The free space a run needs: max(2 × the last checkpoint's size, the floor).
pub fn disk_low_need(last_checkpoint_bytes: Option<u64>, floor_mib: u64) -> u64 {
    let floor = floor_mib.saturating_mul(1024 * 1024);
    last_checkpoint_bytes
        .map_or(0, |b| b.saturating_mul(2))
        .max(floor)
}

/// The last `n` non-empty lines of a log, reading at most its last 64 KiB. A log
/// that cannot be read gives no lines: the alert says so instead of failing.
pub fn log_tail(path: &Path, n: usize) -> Vec<String> {
    const MAX: u64 = 64 * 1024;
    let read = || -> std::io::Result<Vec<u8>> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(MAX)))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(buf)
    };
    let Ok(buf) = read() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<String> = text
        .lines()
        .rev()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .take(n)
        .map(str::to_string)
        .collect();
    lines.reverse();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::Repeats;
    use crate::exit::ExitOutcome;
    use lavender::config::PipelineStep;
    use lavender::failure::Failure;

    const P: &str = "[lavender] ";

    fn one(alert: Alert) -> Notification {
        let mut out = pushes(&alert, P, 20);
        assert_eq!(out.len(), 1, "{out:?}");
        out.remove(0)
    }

    #[test]
    fn alert_texts() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("w.log");
        std::fs::write(&log, "step 40 loss 2.1\nRuntimeError: CUDA OOM\n").unwrap();
        let crash = |outcome, log_file| Alert::Crashed {
            step: PipelineStep::Train,
            outcome,
            failure: Failure::new(FailureKind::Crash, "exit code 1"),
            restart: 2,
            max_restarts: 3,
            restart_in: Duration::from_secs(30),
            log_file,
            repeats: Repeats::default(),
        };
        let n = pushes(&crash(ExitOutcome::Code(1), Some(log.clone())), P, 20);
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].kind, "crashed");
        assert_eq!(n[0].title, "[lavender] crashed: exit code 1");
        assert_eq!(n[0].body, "step 40 loss 2.1\nRuntimeError: CUDA OOM");
        assert_eq!(n[1].kind, "restarting");
        assert_eq!(n[1].title, "[lavender] restarting: attempt 2 of 3");
        assert_eq!(n[1].body, "resuming from the latest checkpoint in 30s");
        let n = pushes(&crash(ExitOutcome::Signal(9), None), P, 20);
        assert_eq!(
            n[0].title,
            "[lavender] crashed: killed by SIGKILL (signal 9)"
        );
        assert_eq!(n[0].body, "(the worker log is empty)");
        // A re-adopted worker's exit is unknown: only the restart is told.
        let n = pushes(&crash(ExitOutcome::Unknown, None), P, 20);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].kind, "restarting");
        // A kind of its own is told, and the first restart is at once.
        let oom = |repeats| Alert::Crashed {
            step: PipelineStep::Train,
            outcome: ExitOutcome::Code(81),
            failure: Failure::new(FailureKind::OutOfMemory, "CUDA out of memory"),
            restart: 1,
            max_restarts: 3,
            restart_in: Duration::ZERO,
            log_file: None,
            repeats,
        };
        let n = pushes(&oom(Repeats::default()), P, 20);
        assert_eq!(
            n[0].title,
            "[lavender] failed (out_of_memory): CUDA out of memory"
        );
        assert_eq!(n[1].body, "resuming from the latest checkpoint now");
        // The same failure again after a long attempt: the push says where the counts stand.
        let again = oom(Repeats {
            same_failure: 2,
            max_same_failure: 3,
            count_reset: true,
        });
        let n = pushes(&again, P, 20);
        assert_eq!(
            n[1].body,
            "resuming from the latest checkpoint now (the count started afresh: the worker ran longer than supervisor.restart_reset_after_s); the same failure 2 times in a row, the pipeline fails at 3 (supervisor.max_same_failure)"
        );

        let n = one(Alert::HungRestarted {
            step: PipelineStep::Train,
            message: "hung at step 40 for 5m 0s; restarted from pretrain-10-00-00-0004".into(),
        });
        assert_eq!(n.kind, "hung");
        assert!(
            n.body
                .starts_with("hung at step 40 for 5m 0s; restarted from")
        );

        let n = one(Alert::RolledBack {
            step: PipelineStep::Train,
            message: "diverged at step 62 (since step 61): rolled back to pretrain-10-00-00-0006 (step 60), skipping the data of steps 61..=62".into(),
            rollback: 1,
            max_rollbacks: 2,
        });
        assert_eq!(n.kind, "rolled_back");
        assert_eq!(n.title, "[lavender] diverged: rolled back (1/2)");
        assert!(
            n.body.contains("rolled back to pretrain-10-00-00-0006"),
            "{}",
            n.body
        );

        let n = one(Alert::Stale {
            step: PipelineStep::Train,
            age_s: Some(372),
            stale_after_s: 300,
            training_step: Some(1234),
        });
        assert_eq!(n.kind, "stalled");
        assert_eq!(n.title, "[lavender] stalled: no heartbeat for 6m 12s");
        assert_eq!(
            n.body,
            "the worker's heartbeat is older than 300 s; last step 1,234"
        );

        let n = one(Alert::Recovered {
            step: PipelineStep::Train,
            stalled_for: Some(Duration::from_secs(400)),
            training_step: Some(1300),
        });
        assert_eq!(n.body, "stalled for 6m 40s; last step 1,300");

        let n = one(Alert::Failed {
            step: PipelineStep::Train,
            reason: "exit code 137; gave up after 3 restart(s)".into(),
            restarts: 3,
            last_exit: Some(ExitOutcome::Code(137)),
            failure: Some(Failure::new(FailureKind::Crash, "exit code 137")),
        });
        assert_eq!(n.title, "[lavender] failed: gave up after 3 restarts");
        assert!(n.body.starts_with("exit code 137; gave up"), "{}", n.body);
        // A failure that will repeat: its kind in the title, cause and fix in the body.
        let n = one(Alert::Failed {
            step: PipelineStep::Train,
            reason: "the worker rejected its config: bad lr; to fix: correct the config".into(),
            restarts: 0,
            last_exit: Some(ExitOutcome::Code(78)),
            failure: Some(Failure::new(FailureKind::Config, "bad lr")),
        });
        assert_eq!(n.title, "[lavender] failed: config");
        assert!(
            n.body.contains("bad lr") && n.body.contains("to fix:"),
            "{}",
            n.body
        );
        // A step that never ran has no exit to tell: the reason is the news.
        let n = one(Alert::Failed {
            step: PipelineStep::Dedup,
            reason: "start worker `lavender-worker`: not found".into(),
            restarts: 0,
            last_exit: None,
            failure: None,
        });
        assert_eq!(n.title, "[lavender] failed: step dedup could not run");
        assert!(
            n.body
                .starts_with("start worker `lavender-worker`: not found; "),
            "{}",
            n.body
        );

        let n = one(Alert::DiskLow {
            path: "/data".into(),
            avail_bytes: 1288490189,
            need_bytes: 2 * 1288490189,
        });
        assert_eq!(n.title, "[lavender] disk low: 1.2 GiB free, need 2.4 GiB");

        let n = one(Alert::Finished {
            duration: Duration::from_secs(3 * 3600 + 720),
            final_loss: Some(1.23456),
            final_checkpoint: Some("final-05-12-22-0007".into()),
            goodput: Some("goodput 94.2 % · lost 11 min: rework 8 · startup 3".into()),
        });
        assert_eq!(n.title, "[lavender] finished in 3h 12m");
        assert_eq!(
            n.body,
            "final loss 1.235, final checkpoint final-05-12-22-0007, goodput 94.2 % · lost 11 min: rework 8 · startup 3"
        );
        let n = one(Alert::ReplicationBehind {
            target: "s3://b/runs".into(),
            lag_s: Some(372.0),
            lag_steps: Some(1200),
            max_lag_s: Some(300),
            failures: 4,
            last_error: Some("s3://b/runs: connection refused".into()),
        });
        assert_eq!(n.kind, "replication_behind");
        assert_eq!(n.title, "[lavender] replication behind: s3://b/runs");
        assert_eq!(
            n.body,
            "the newest remote checkpoint is 1,200 steps behind; the oldest waiting for 6m 12s (replicate.max_lag_s 300); 4 failed upload attempt(s) in a row; s3://b/runs: connection refused"
        );
        let n = one(Alert::ReplicationRecovered {
            target: "s3://b/runs".into(),
            after: Duration::from_secs(400),
            newest_remote: Some("pretrain-10-00-00-0009".into()),
            lag_steps: Some(0),
        });
        assert_eq!(n.title, "[lavender] replication caught up: s3://b/runs");
        assert_eq!(
            n.body,
            "caught up after 6m 40s, newest remote checkpoint pretrain-10-00-00-0009, 0 steps behind"
        );
        assert!(
            pushes(
                &Alert::StoppedExternally {
                    step: PipelineStep::Train
                },
                P,
                20
            )
            .is_empty()
        );
    }

    #[test]
    fn disk_need_is_twice_the_checkpoint_or_the_floor() {
        const MIB: u64 = 1024 * 1024;
        assert_eq!(disk_low_need(None, 1024), 1024 * MIB);
        assert_eq!(disk_low_need(Some(100 * MIB), 1024), 1024 * MIB);
        assert_eq!(disk_low_need(Some(700 * MIB), 1024), 1400 * MIB);
    }

    #[test]
    fn log_tail_reads_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("w.log");
        let text: String = (1..=50).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, format!("{text}\n\n")).unwrap();
        assert_eq!(log_tail(&log, 3), ["line 48", "line 49", "line 50"]);
        assert!(log_tail(&dir.path().join("missing.log"), 3).is_empty());
    }
}
