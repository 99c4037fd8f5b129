//! Restore drills (`lavenderd drill`, and `supervisor.drill` while training goes
//! on): a kept, verified checkpoint is resumed by a worker of its own — the run's
//! command, at the lowest CPU and I/O priority, one thread, its run folder a scratch
//! folder under `state/drills/` removed after — which trains K steps and stops
//! (`LAVENDER_STOP_AT_STEP`, as on a SIGTERM). Its steps are compared with the
//! values the run recorded for them (`lavender::replay`): a checkpoint that resumes
//! the run gives them again. The verdict is kept beside the checkpoint
//! (`lavender::checkpoint::drills`), which retention then keeps.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lavender::checkpoint::drills::{self, DrillVerdict};
use lavender::checkpoint::{Checkpoint, list_run_checkpoints, verdicts};
use lavender::config::{Config, PipelineStep};
use lavender::layout::Layout;
use lavender::pipeline_file::PipelineRecord;
use lavender::replay::{Replay, Tolerance, TrainStepValues, Verdict};

/// The environment variable a worker stops at (`lavender-worker`'s
/// `--stop-at-step`, `lavender_protocol`'s `Worker.should_stop`).
pub const STOP_AT_STEP_VAR: &str = "LAVENDER_STOP_AT_STEP";

/// The most steps a drill trains by default.
pub const MAX_DEFAULT_STEPS: u64 = 50;

/// A drill ready to run: the checkpoint, the steps to train and what they gave.
#[derive(Debug)]
pub struct Drill {
    pub run_dir: PathBuf,
    pub checkpoint: Checkpoint,
    /// Steps the drill trains.
    pub steps: u64,
    /// The run's recorded values of those steps.
    pub expected: Vec<TrainStepValues>,
    pub tolerance: Tolerance,
}

impl Drill {
    /// The drill of `checkpoint` (a name in `run_dir`; default: the newest the daemon
    /// or `lavenderd verify` found intact) for `steps` steps (default: up to the next
    /// step the run recorded, at most [`MAX_DEFAULT_STEPS`]).
    pub fn plan(
        config: &Config,
        run_dir: &Path,
        checkpoint: Option<&str>,
        steps: Option<u64>,
    ) -> Result<Drill> {
        let ckpts = list_run_checkpoints(run_dir)
            .with_context(|| format!("list the checkpoints of {}", run_dir.display()))?;
        let record = lavender::replay::read_all(&run_dir.join(lavender::log_history::SIDECAR))?;
        let checkpoint = match checkpoint {
            Some(name) => {
                let name = Path::new(name)
                    .file_name()
                    .map_or(name.into(), |n| n.to_string_lossy());
                let found = ckpts.iter().find(|c| c.name == name).with_context(|| {
                    format!(
                        "{} has no complete checkpoint {name} (lavenderd checkpoints --run {} lists them)",
                        run_dir.display(),
                        run_dir.file_name().unwrap_or_default().to_string_lossy()
                    )
                })?;
                if !verdicts::read(run_dir, &found.name).is_good() {
                    // Read back now: a drill resumes only an intact checkpoint.
                    let check = verdicts::Check::Done(verdicts::verify_and_record(found)?);
                    if !check.is_good() {
                        bail!(
                            "checkpoint {name} is not intact ({}); a drill resumes only a verified checkpoint",
                            check.describe()
                        );
                    }
                }
                found.clone()
            }
            // The newest verified one the run trained past (a final one has nothing
            // after it to compare with).
            None => ckpts
                .iter()
                .rev()
                .filter(|c| verdicts::read(run_dir, &c.name).is_good())
                .find(|c| record.iter().any(|v| v.step > c.state.step))
                .cloned()
                .with_context(|| {
                    format!(
                        "{} has no verified checkpoint the run trained past (lavenderd verify --run {} reads them back; a final checkpoint has no steps after it to compare with)",
                        run_dir.display(),
                        run_dir.file_name().unwrap_or_default().to_string_lossy()
                    )
                })?,
        };
        let from = checkpoint.state.step;
        let after: Vec<&TrainStepValues> = record.iter().filter(|v| v.step > from).collect();
        let steps = match steps {
            Some(0) => bail!("--steps 0 trains nothing; give 1 or more"),
            Some(k) => k,
            None => after
                .iter()
                .map(|v| v.step - from)
                .min()
                .map_or(1, |k| k.min(MAX_DEFAULT_STEPS)),
        };
        let mut expected: Vec<TrainStepValues> = Vec::new();
        for v in after.into_iter().filter(|v| v.step <= from + steps) {
            // A step recorded twice (a replay after it) counts as last recorded.
            expected.retain(|e| e.step != v.step);
            expected.push(v.clone());
        }
        if expected.is_empty() {
            bail!(
                "the run recorded no step after {} (step {from}) up to step {} to compare a drill with; drill an older checkpoint, or wait for the run to train past it",
                checkpoint.name,
                from + steps
            );
        }
        // One thread: bit for bit only where the run trained with one too.
        let tolerance = match config.replay_tolerance() {
            Tolerance::Exact if config.threads != 1 => {
                Tolerance::Relative(lavender::config::ReplayTolerance::DEFAULT_RELATIVE)
            }
            t => t,
        };
        Ok(Drill {
            run_dir: run_dir.to_path_buf(),
            checkpoint,
            steps,
            expected,
            tolerance,
        })
    }

    /// Runs the drill and records its verdict beside the checkpoint. A worker that
    /// fails or stops short is an error, not a verdict (nothing is recorded).
    pub fn run(&self, layout: &Layout, config: &Config) -> Result<DrillVerdict> {
        let scratch = layout.state_dir.join("drills").join(format!(
            "{}-{}-{}",
            run_name(&self.run_dir),
            self.checkpoint.name,
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch)
            .with_context(|| format!("create the drill's folder {}", scratch.display()))?;
        let outcome = {
            let _reading = drills::reading(&self.run_dir, &self.checkpoint.name)?;
            self.train(layout, config, &scratch)
        };
        let removed = std::fs::remove_dir_all(&scratch);
        let verdict = outcome?;
        if let Err(e) = removed {
            tracing::warn!(
                "could not remove the drill's folder {}: {e}",
                scratch.display()
            );
        }
        drills::record(&self.run_dir, &self.checkpoint.name, &verdict)?;
        Ok(verdict)
    }

    fn train(&self, layout: &Layout, config: &Config, scratch: &Path) -> Result<DrillVerdict> {
        let run = scratch.join("run");
        let record = PipelineRecord::load(layout).unwrap_or_else(|_| PipelineRecord::idle());
        let mut spec =
            crate::pipeline::plan::spawn_spec(layout, config, &record, PipelineStep::Train, false);
        spec.run_dir = Some(run.clone());
        spec.resume = Some(self.checkpoint.path.clone());
        spec.env.remove(crate::pipeline::plan::FORCE_VAR);
        let stop_at = self.checkpoint.state.step + self.steps;
        spec.env
            .insert(STOP_AT_STEP_VAR.to_string(), stop_at.to_string());
        // One thread (lavender-worker's config key; torch and BLAS read these).
        spec.env.insert("LAVENDER__THREADS".into(), "1".into());
        spec.env.insert("OMP_NUM_THREADS".into(), "1".into());
        // `supervisor.drill.device`: another device than the run's (a second GPU).
        if let Some(device) = &config.supervisor.drill.device {
            spec.env.insert("LAVENDER__DEVICE".into(), device.clone());
        }
        let argv = spec.argv();
        let log_path = scratch.join("worker.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("create {}", log_path.display()))?;
        // A bare `lavender-worker` is found as a launch finds it (PATH, then beside us).
        let program = crate::locate::worker_program_here(&argv[0])
            .map_err(|e| anyhow::anyhow!("the drill's worker: {e}"))?;
        let mut cmd = std::process::Command::new(&program);
        cmd.args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .envs(&spec.env);
        for var in crate::process::spawn::SCRUBBED_ENV {
            cmd.env_remove(var);
        }
        lowest_priority(&mut cmd);
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("start the drill's worker `{}` (worker.command)", argv[0]))?;
        let limit = Duration::from_secs(config.supervisor.startup_grace_s)
            + Duration::from_secs(60) * self.steps.min(60) as u32;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if started.elapsed() > limit {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.wait();
                bail!(
                    "the drill's worker did not finish {} step(s) in {:.0} s; killed. Its log: {}",
                    self.steps,
                    limit.as_secs_f64(),
                    tail(&log_path)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if !status.success() {
            bail!(
                "the drill's worker failed ({status}) resuming {}: {}",
                self.checkpoint.name,
                tail(&log_path)
            );
        }
        let (again, _) = lavender::replay::read_from(&run.join(lavender::log_history::SIDECAR), 0)?;
        let mut replay = Replay::new(
            &run_name(&self.run_dir),
            &self.checkpoint.name,
            self.checkpoint.state.step,
            self.tolerance,
            self.expected.iter().cloned(),
        );
        for v in &again {
            replay.observe(v);
        }
        replay.ended();
        let status = replay.status();
        match replay.verdict {
            Verdict::Passed | Verdict::Mismatch => Ok(DrillVerdict {
                passed: replay.verdict == Verdict::Passed,
                steps: status.steps_checked,
                mismatch: status.mismatch,
                tolerance: status.tolerance,
                largest_difference: status.largest_difference,
                at: lavender::time::rfc3339_z(lavender::time::now_utc()),
            }),
            Verdict::Checking | Verdict::Incomplete => bail!(
                "the drill's worker stopped with {} of its {} step(s) not recorded; nothing to judge. Its log: {}",
                status.steps_to_check,
                self.expected.len(),
                tail(&log_path)
            ),
        }
    }
}

fn run_name(run_dir: &Path) -> String {
    run_dir
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// The last lines of the drill worker's log, for an error.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The drill's worker runs only on what training leaves: a session of its own (so
/// the killpg above reaches all of it), nice 19, and on Linux the idle scheduling
/// class, the idle I/O class and its session's autogroup at nice 19 (under autogroup
/// scheduling, the default of most kernels, a nice weighs only within its session,
/// and the training worker's is another).
fn lowest_priority(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe syscalls run on the child
    // itself (setsid, open, write, close, sched_setscheduler, setpriority,
    // ioprio_set); failures are ignored.
    unsafe {
        cmd.pre_exec(|| {
            use nix::libc;
            libc::setsid();
            #[cfg(target_os = "linux")]
            {
                let fd = libc::open(c"/proc/self/autogroup".as_ptr(), libc::O_WRONLY);
                if fd >= 0 {
                    libc::write(fd, b"19".as_ptr().cast(), 2);
                    libc::close(fd);
                }
                let param = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
                const IOPRIO_WHO_PROCESS: libc::c_long = 1;
                const IOPRIO_CLASS_IDLE: libc::c_long = 3;
                libc::syscall(
                    libc::SYS_ioprio_set,
                    IOPRIO_WHO_PROCESS,
                    0 as libc::c_long,
                    IOPRIO_CLASS_IDLE << 13,
                );
            }
            libc::setpriority(libc::PRIO_PROCESS, 0, 19);
            Ok(())
        });
    }
}
/// `supervisor.drill`: follows the refresher's snapshots; while a training worker
/// runs, a drill of the run's newest verified checkpoint it trained past every
/// `every_checkpoints` newly verified checkpoints and/or every `every_hours`, one at
/// a time on the blocking pool. A failed drill alerts once per checkpoint; a drill
/// that could not run (nothing recorded past the checkpoint yet) is tried again at
/// the next look that finds one due.
pub(crate) fn spawn_schedule(
    layout: Layout,
    config: Config,
    mut snapshots: tokio::sync::watch::Receiver<std::sync::Arc<crate::status::StatusSnapshot>>,
    alerts: crate::alert::AlertSender,
) {
    let schedule = config.supervisor.drill.clone();
    if !schedule.enabled() {
        return;
    }
    tokio::spawn(async move {
        let mut due = Due::default();
        let mut alerted: Vec<(PathBuf, String)> = Vec::new();
        loop {
            let (run, verified) = {
                let snap = snapshots.borrow_and_update();
                let training = snap
                    .record
                    .state
                    .worker()
                    .is_some_and(|w| w.step == PipelineStep::Train);
                (
                    snap.facts.run_dir.clone().filter(|_| training),
                    snap.facts.verified_checkpoints,
                )
            };
            if let Some(run_dir) = run
                && due.now(&schedule, &run_dir, verified)
            {
                let (layout, config, dir) = (layout.clone(), config.clone(), run_dir.clone());
                let drilled = tokio::task::spawn_blocking(move || {
                    let drill = Drill::plan(&config, &dir, None, None)?;
                    let verdict = drill.run(&layout, &config)?;
                    anyhow::Ok((drill.checkpoint.name, verdict))
                })
                .await;
                match drilled {
                    Ok(Ok((name, verdict))) => {
                        due.done(&run_dir, verified);
                        if verdict.passed {
                            tracing::info!(
                                "drill of {name}: {} step(s) as the run trained them ({})",
                                verdict.steps,
                                verdict.tolerance
                            );
                        } else if !alerted.contains(&(run_dir.clone(), name.clone())) {
                            alerted.push((run_dir.clone(), name.clone()));
                            let _ = alerts.send(crate::alert::Alert::DrillFailed {
                                message: format!(
                                    "checkpoint {name} of {} does not resume the run: {} ({}); the checkpoint is intact, its resume is not",
                                    run_dir.display(),
                                    verdict.mismatch.as_deref().unwrap_or("a step differs"),
                                    verdict.tolerance
                                ),
                            });
                        }
                    }
                    Ok(Err(e)) => tracing::debug!("drill not run yet: {e:#}"),
                    Err(e) => tracing::warn!("the drill task failed: {e}"),
                }
            }
            if snapshots.changed().await.is_err() {
                return;
            }
        }
    });
}

/// When the next scheduled drill is due: per run, the verified checkpoints and the
/// time at the last drill.
#[derive(Default)]
struct Due {
    last: Option<(PathBuf, u64, Instant)>,
}

impl Due {
    fn now(
        &mut self,
        schedule: &lavender::config::DrillSchedule,
        run: &Path,
        verified: u64,
    ) -> bool {
        let (at_count, at) = match &self.last {
            Some((r, n, t)) if r == run => (*n, *t),
            // A new run (or the first look): counted from here.
            _ => {
                self.last = Some((run.to_path_buf(), 0, Instant::now()));
                (0, Instant::now())
            }
        };
        let by_count = schedule
            .every_checkpoints
            .is_some_and(|n| verified >= at_count + n);
        let by_time = schedule
            .every_hours
            .is_some_and(|h| at.elapsed().as_secs_f64() >= h * 3600.0 && verified > 0);
        by_count || by_time
    }

    fn done(&mut self, run: &Path, verified: u64) {
        self.last = Some((run.to_path_buf(), verified, Instant::now()));
    }
}
