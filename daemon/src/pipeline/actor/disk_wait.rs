//! The disk never surprises the run. A worker that ends with `disk_full` (a save met
//! `ENOSPC` or `EDQUOT`; the worker removed what it had half written, so the latest
//! verified checkpoint is as it was) is neither a crash nor a restart: the pipeline
//! waits (`waiting_for_disk`, `pipeline.disk_wait`), the disk is checked every few
//! seconds off the actor (`pipeline/save_room.rs`, early retention included), and the
//! worker is brought back from the latest verified checkpoint once the next save
//! fits. While a worker runs, the watchdog's word that the next save looks short
//! has the disk checked the same way: early retention, and an alert with the
//! numbers if it still does not fit.

use std::time::Duration;

use lavender::config::PipelineStep;
use lavender::failure::Failure;
use lavender::status::DiskWait;

use super::{Actor, Input};
use crate::alert::Alert;
use crate::decisions::{Decision, DecisionKind, Evidence, Rule};
use crate::exit::ExitOutcome;
use crate::pipeline::machine::{DiskWaiting, Event, PendingRestart, Phase, Restart};
use crate::pipeline::save_room::{self, Asked, CheckInput, DiskCheck, bytes};
use crate::push::format::thousands;

/// What the actor keeps about the disk between checks.
#[derive(Debug, Default)]
pub(super) struct DiskState {
    /// A check asked for by the watchdog is out: no second one meanwhile.
    running_check: bool,
    /// The need the wait's first check set (more than was free when the save failed).
    at_least: Option<u64>,
    /// The "next save will not fit" alert went out; again only once a check fits.
    short_told: bool,
}

/// Between two checks while waiting: the supervisor's poll interval, within reason.
fn check_every(config: &lavender::config::Config) -> Duration {
    crate::pipeline::timings::poll_interval(&config.supervisor)
        .clamp(Duration::from_millis(200), Duration::from_secs(5))
}

impl Actor {
    /// The training worker ended with `disk_full`: wait for space. False in observe
    /// mode (the daemon brings nothing back; the policy says what it would have done).
    pub(super) fn wait_for_disk(&mut self, failure: &Failure, outcome: ExitOutcome) -> bool {
        if self.observing() {
            return false;
        }
        let shown = DiskWait {
            path: self.layout.data_root.clone(),
            need_bytes: 0,
            free_bytes: None,
            since: lavender::time::rfc3339_z(lavender::time::now_utc()),
            message: format!("a save found the disk full ({}); checking", failure.message),
        };
        self.disk.at_least = None;
        self.on(Event::DiskFullJudged {
            wait: DiskWaiting {
                restart: Restart {
                    why: Some(PendingRestart::Failed(failure.clone())),
                    last_exit: Some(outcome),
                },
                check_at: None,
                every: check_every(&self.config),
                told: false,
            },
            error: failure.message.clone(),
            shown,
        });
        self.commit();
        true
    }

    /// The watchdog saw the next save short of space while a worker runs.
    pub(super) fn on_disk_short(&mut self) {
        if self.disk.running_check || !matches!(self.phase, Phase::Running { .. }) {
            return;
        }
        self.disk.running_check = true;
        self.spawn_check(Asked::Watchdog);
    }

    /// A check asked by the machine (`CheckDisk`), while waiting.
    pub(super) fn check_disk(&mut self, first: bool) {
        self.spawn_check(if first {
            Asked::WaitFirst
        } else {
            Asked::Wait {
                at_least: self.disk.at_least,
            }
        });
    }

    fn spawn_check(&self, asked: Asked) {
        let run_dir = self.record.run_dir.clone();
        let root = self.layout.checkpoints_root();
        // Early retention deletes only inside the checkpoints root, and not in observe mode.
        let may_delete = !self.observing()
            && run_dir
                .as_deref()
                .is_some_and(|d| crate::checkpoints::retain::inside(d, &root));
        let input = CheckInput {
            data_root: self.layout.data_root.clone(),
            run_dir,
            floor_mib: self.config.notify.disk_floor_mib,
            keep: may_delete.then_some(self.config.training.keep_checkpoints as usize),
            asked,
        };
        let tx = self.reports.clone();
        tokio::spawn(async move {
            let fallback = DiskCheck {
                path: input.data_root.clone(),
                next_save_bytes: None,
                need_bytes: 0,
                free_bytes: None,
                free_before: None,
                dropped: Vec::new(),
                retention_error: Some("the check of the disk did not finish".into()),
                for_wait: input.asked.by_wait(),
            };
            let check = tokio::task::spawn_blocking(move || save_room::check(&input))
                .await
                .unwrap_or(fallback);
            tx.send(Input::Disk(check));
        });
    }

    /// A check is back: what early retention deleted goes in the decision log, then
    /// the machine decides (wait on, resume, or tell while running).
    pub(super) fn on_disk_checked(&mut self, check: DiskCheck) {
        self.disk.running_check = false;
        if let Some(e) = &check.retention_error {
            tracing::warn!("early retention: {e}");
        }
        if !check.dropped.is_empty() {
            self.early_retention_decided(&check);
        }
        self.on(Event::DiskChecked(check));
    }

    fn step_now(&self) -> PipelineStep {
        self.record.active_step.unwrap_or(PipelineStep::Train)
    }

    fn early_retention_decided(&self, check: &DiskCheck) {
        let names: Vec<String> = check
            .dropped
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        let keep = self.config.training.keep_checkpoints;
        let saw = Evidence {
            note: Some(format!(
                "the next save {} before",
                check_numbers(check.need_bytes, check.free_before, check)
            )),
            ..Evidence::default()
        };
        let did = format!(
            "deleted {} checkpoint(s) before the next save's own retention would have: {} (kept {} and always the newest, the best and the newest verified); {} free now",
            names.len(),
            names.join(", "),
            keep.saturating_sub(1),
            check.free_bytes.map_or("unknown".to_string(), bytes)
        );
        self.decisions.record(Decision::new(
            DecisionKind::EarlyRetention,
            self.step_now(),
            saw,
            Rule::new("training.keep_checkpoints", keep),
            did,
        ));
    }

    /// The next save does not fit yet: the record says where, how much is needed and
    /// how much is free, and the first time the alert and the decision log too.
    pub(super) fn disk_still_full(&mut self, check: DiskCheck, first: bool) {
        // The record's own write may fail on the full disk: the status still shows it.
        self.commit_changed();
        if !first {
            return;
        }
        self.disk.at_least = Some(check.need_bytes);
        let message = check.waiting_message();
        let step = self.step_now();
        tracing::warn!(%step, "{message}");
        let floor = self.config.notify.disk_floor_mib;
        let failure = match &self.phase {
            Phase::WaitingForDisk { wait } => {
                wait.restart.why.as_ref().and_then(|w| w.failure()).cloned()
            }
            _ => None,
        };
        let saw = Evidence {
            failure,
            note: Some(format!("the next save {}", check.numbers())),
            ..Evidence::default()
        };
        self.decisions.record(Decision::new(
            DecisionKind::WaitForDisk,
            step,
            saw,
            Rule::new("notify.disk_floor_mib", floor),
            format!(
                "wait until {} are free under {} (the next save × 1.1 + notify.disk_floor_mib), checked every {:.1} s, then resume from the latest verified checkpoint; not counted as a restart",
                bytes(check.need_bytes),
                check.path.display(),
                check_every(&self.config).as_secs_f64()
            ),
        ));
        self.alert(Alert::DiskFull { step, message });
    }

    /// The next save fits: the worker is brought back from the latest verified
    /// checkpoint (the launch checks it, as every resume does).
    pub(super) fn disk_back(&mut self, check: DiskCheck, restart: Restart, told: bool) {
        let step = self.step_now();
        self.disk.at_least = None;
        let message = format!(
            "space is back under {}: {} free, the next save needs {}; resuming from the latest verified checkpoint",
            check.path.display(),
            check.free_bytes.map_or("unknown".to_string(), bytes),
            bytes(check.need_bytes)
        );
        tracing::info!(%step, "{message}");
        if told {
            let saw = Evidence {
                note: Some(format!("the next save {}", check.numbers())),
                ..Evidence::default()
            };
            self.decisions.record(Decision::new(
                DecisionKind::DiskResume,
                step,
                saw,
                Rule::new("notify.disk_floor_mib", self.config.notify.disk_floor_mib),
                "resume the worker from the latest verified checkpoint".to_string(),
            ));
            self.alert(Alert::DiskSpaceBack { step, message });
        }
        self.on_restart_due(restart);
    }

    /// A check made while a worker runs is back: an alert with the numbers when the
    /// next save still does not fit (once, until one fits again).
    pub(super) fn disk_checked_running(&mut self, check: DiskCheck) {
        if check.fits() {
            self.disk.short_told = false;
            return;
        }
        if std::mem::replace(&mut self.disk.short_told, true) {
            return;
        }
        let step_text = self
            .last_heartbeat()
            .and_then(|(_, s)| save_room::save_due_at(&save_room::stages_of(&self.config), s))
            .map_or("the next save".to_string(), |due| {
                format!("the save due at step {}", thousands(due))
            });
        let message = format!("{step_text} {}", check.numbers());
        tracing::warn!("{message}");
        self.alert(Alert::SaveWontFit {
            step: self.step_now(),
            message,
        });
    }
}

/// "needs 480 MiB; 310 MiB free under /data", with the free bytes given.
fn check_numbers(need: u64, free: Option<u64>, check: &DiskCheck) -> String {
    format!(
        "needs {}; {} free under {}",
        bytes(need),
        free.map_or("unknown".to_string(), bytes),
        check.path.display()
    )
}
