//! `state/pipeline.json`: the daemon's record of its pipeline, everything it must
//! remember across its own restarts (which step, which run, which worker pid + start
//! time or Slurm job, restarts). The daemon alone writes it, atomically on every
//! transition; commands with no daemon read it here (`status`, `logs`, `prune`,
//! `start`). Paths inside the data root are written relative to it
//! ([`crate::data_root::to_recorded`]), so a stopped pipeline's data root can be
//! moved (`mv` to another disk) and the record still finds its run, log and
//! checkpoints; records with absolute paths (older versions) still load.

mod request;
mod state;
mod transition;
mod worker;

pub use request::{ConfigFileRef, MAX_CHUNK, StartRequest, sha256_hex};
pub use state::{RecordState, StopCause};
pub use transition::RecordEvent;
pub use worker::{JobSeen, ProcessIdentity, SlurmJob, WorkerHandle, WorkerRecord};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{PipelineStep, Scale};
use crate::error::{Error, Result};
use crate::failure::{Failure, SameFailure};
use crate::layout::Layout;
use crate::skips::SkipRange;
use crate::status::{DiskWait, PipelineState, Recovery, StepState};
use state::FlatState;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEntry {
    pub name: PipelineStep,
    pub state: StepState,
}

/// The daemon's record of its pipeline. Its state ([`RecordState`]) holds the
/// fields that belong to it; the rest belong to the run whatever its state. Changed
/// only by [`PipelineRecord::apply`] (`transition.rs`); saved in the flat form every
/// version wrote ([`RecordFile`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "RecordFile", into = "RecordFile")]
pub struct PipelineRecord {
    pub state: RecordState,
    pub request: Option<StartRequest>,
    pub chunk: Option<u32>,
    pub scale: Option<Scale>,
    pub steps: Vec<StepEntry>,
    pub active_step: Option<PipelineStep>,
    pub run_dir: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    pub restarts: u32,
    /// The checkpoint the train step started from (its crash restarts fall back to it
    /// when the run has no checkpoint of its own yet).
    pub resume_from: Option<PathBuf>,
    pub last_error: Option<String>,
    /// Restarts in a row whose worker did not train past the step it resumed from.
    pub no_progress_restarts: u32,
    /// The longest steady interval between two training heartbeats seen in this
    /// run, in seconds (`supervisor.stale_after_s: auto` learns from it).
    pub heartbeat_interval_s: Option<f64>,
    /// The last time the daemon brought the run back by itself (status `pipeline.recovery`).
    pub recovery: Option<Recovery>,
    /// Why the last worker failed (status `pipeline.failure`).
    pub failure: Option<Failure>,
    /// This run's rollbacks after a divergence, as appended to its
    /// `skipped.json` (status `pipeline.rollbacks`).
    pub rollbacks: Vec<SkipRange>,
    /// The failure the last workers of this step ended with, and how many in a row
    /// (`supervisor.max_same_failure`).
    pub same_failure: Option<SameFailure>,
    pub updated_at: String,
}

/// `state/pipeline.json` as every version wrote it: flat, the state's fields
/// (`worker`, `restart_pending`, `stop_cause`, `disk_wait`) beside the others. Old
/// files read through it with no migration; the record is saved in it unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RecordFile {
    state: PipelineState,
    #[serde(default)]
    request: Option<StartRequest>,
    chunk: Option<u32>,
    scale: Option<Scale>,
    #[serde(default)]
    steps: Vec<StepEntry>,
    active_step: Option<PipelineStep>,
    run_dir: Option<PathBuf>,
    log_file: Option<PathBuf>,
    worker: Option<WorkerRecord>,
    #[serde(default)]
    restarts: u32,
    /// The checkpoint the train step started from (its crash restarts fall back to it
    /// when the run has no checkpoint of its own yet).
    resume_from: Option<PathBuf>,
    /// A crash restart is due (the daemon died during the backoff).
    #[serde(default)]
    restart_pending: bool,
    last_error: Option<String>,
    /// Why the pipeline stopped (set from the moment a stop begins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stop_cause: Option<StopCause>,
    /// Restarts in a row whose worker did not train past the step it resumed from.
    #[serde(default)]
    no_progress_restarts: u32,
    /// The longest steady interval between two training heartbeats seen in this
    /// run, in seconds (`supervisor.stale_after_s: auto` learns from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    heartbeat_interval_s: Option<f64>,
    /// The last time the daemon brought the run back by itself (status `pipeline.recovery`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recovery: Option<Recovery>,
    /// Why the last worker failed (status `pipeline.failure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure: Option<Failure>,
    /// This run's rollbacks after a divergence, as appended to its
    /// `skipped.json` (status `pipeline.rollbacks`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    rollbacks: Vec<SkipRange>,
    /// The failure the last workers of this step ended with, and how many in a row
    /// (`supervisor.max_same_failure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    same_failure: Option<SameFailure>,
    /// Why the pipeline waits for disk space (status `pipeline.disk_wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disk_wait: Option<crate::status::DiskWait>,
    updated_at: String,
}

impl From<RecordFile> for PipelineRecord {
    fn from(f: RecordFile) -> PipelineRecord {
        PipelineRecord {
            state: RecordState::from_flat(FlatState {
                state: f.state,
                worker: f.worker,
                restart_pending: f.restart_pending,
                stop_cause: f.stop_cause,
                disk_wait: f.disk_wait,
            }),
            request: f.request,
            chunk: f.chunk,
            scale: f.scale,
            steps: f.steps,
            active_step: f.active_step,
            run_dir: f.run_dir,
            log_file: f.log_file,
            restarts: f.restarts,
            resume_from: f.resume_from,
            last_error: f.last_error,
            no_progress_restarts: f.no_progress_restarts,
            heartbeat_interval_s: f.heartbeat_interval_s,
            recovery: f.recovery,
            failure: f.failure,
            rollbacks: f.rollbacks,
            same_failure: f.same_failure,
            updated_at: f.updated_at,
        }
    }
}

impl From<PipelineRecord> for RecordFile {
    fn from(r: PipelineRecord) -> RecordFile {
        let FlatState {
            state,
            worker,
            restart_pending,
            stop_cause,
            disk_wait,
        } = r.state.to_flat();
        RecordFile {
            state,
            request: r.request,
            chunk: r.chunk,
            scale: r.scale,
            steps: r.steps,
            active_step: r.active_step,
            run_dir: r.run_dir,
            log_file: r.log_file,
            worker,
            restarts: r.restarts,
            resume_from: r.resume_from,
            restart_pending,
            last_error: r.last_error,
            stop_cause,
            no_progress_restarts: r.no_progress_restarts,
            heartbeat_interval_s: r.heartbeat_interval_s,
            recovery: r.recovery,
            failure: r.failure,
            rollbacks: r.rollbacks,
            same_failure: r.same_failure,
            disk_wait,
            updated_at: r.updated_at,
        }
    }
}

impl PipelineRecord {
    pub fn idle() -> PipelineRecord {
        PipelineRecord {
            state: RecordState::Idle,
            request: None,
            chunk: None,
            scale: None,
            steps: Vec::new(),
            active_step: None,
            run_dir: None,
            log_file: None,
            restarts: 0,
            resume_from: None,
            last_error: None,
            no_progress_restarts: 0,
            heartbeat_interval_s: None,
            recovery: None,
            failure: None,
            rollbacks: Vec::new(),
            same_failure: None,
            updated_at: crate::time::rfc3339_z(crate::time::now_utc()),
        }
    }

    /// The worker the record names (running or stopping).
    pub fn worker(&self) -> Option<&WorkerRecord> {
        self.state.worker()
    }

    /// Why the pipeline stops or stopped.
    pub fn stop_cause(&self) -> Option<StopCause> {
        self.state.stop_cause()
    }

    /// Why the pipeline waits for disk space (status `pipeline.disk_wait`).
    pub fn disk_wait(&self) -> Option<&DiskWait> {
        self.state.disk_wait()
    }

    /// A crash restart, or the return after a disk wait, is due.
    pub fn restart_pending(&self) -> bool {
        self.state.restart_pending()
    }

    /// The step to run next: the first not done (pending, or running when the
    /// daemon died during it); `None` when every step is done.
    pub fn next_step(&self) -> Option<PipelineStep> {
        self.steps
            .iter()
            .find(|s| s.state == StepState::Pending || s.state == StepState::Running)
            .map(|s| s.name)
    }

    /// The saved record (`state/pipeline.json`) with its paths resolved against the
    /// data root, or `idle` when there is none yet.
    pub fn load(layout: &Layout) -> Result<PipelineRecord> {
        let path = layout.pipeline_json();
        let record: PipelineRecord = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Malformed {
                path: path.clone(),
                reason: format!(
                    "not a valid pipeline state file ({e}); move it away to start afresh"
                ),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PipelineRecord::idle()),
            Err(e) => return Err(Error::io("read", &path, e)),
        };
        Ok(record.with_paths(|p| layout.resolve_recorded(p)))
    }

    /// Writes the record atomically, paths inside the data root relative to it. The
    /// daemon alone writes it, on every transition.
    pub fn save(&mut self, layout: &Layout) -> Result<()> {
        self.updated_at = crate::time::rfc3339_z(crate::time::now_utc());
        let recorded = self.clone().with_paths(|p| layout.to_recorded(p));
        crate::atomic::write_json(&layout.pipeline_json(), &recorded)
    }

    /// The record with `f` applied to each of its paths.
    fn with_paths(mut self, f: impl Fn(&Path) -> PathBuf) -> PipelineRecord {
        for path in [&mut self.run_dir, &mut self.log_file, &mut self.resume_from] {
            if let Some(p) = path.as_mut() {
                *p = f(p);
            }
        }
        self
    }

    fn set_step(&mut self, name: PipelineStep, state: StepState) {
        if let Some(entry) = self.steps.iter_mut().find(|s| s.name == name) {
            entry.state = state;
        }
    }

    pub fn step_state(&self, name: PipelineStep) -> Option<StepState> {
        self.steps.iter().find(|s| s.name == name).map(|s| s.state)
    }

    /// True while a start must be refused (409): a worker runs, a stop is under
    /// way, or a crash restart is pending.
    pub fn is_active(&self) -> bool {
        matches!(
            self.state,
            RecordState::Running { .. } | RecordState::Stopping { .. }
        ) || self.restart_pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_with_its_paths_under_the_data_root() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().to_path_buf(), None);
        std::fs::create_dir_all(&layout.state_dir).unwrap();
        assert_eq!(
            PipelineRecord::load(&layout).unwrap().state.kind(),
            PipelineState::Idle
        );
        std::fs::write(
            layout.pipeline_json(),
            r#"{"state":"running","run_dir":"checkpoints/run-1","log_file":null,
                "worker":{"pid":7,"start_time":"1","step":"train",
                          "started_at":"2026-01-01T00:00:00Z"},
                "restarts":2,"chunk":1,"scale":null,"active_step":"train",
                "resume_from":null,"last_error":null,"updated_at":"2026-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        let record = PipelineRecord::load(&layout).unwrap();
        assert_eq!(record.state.kind(), PipelineState::Running);
        assert_eq!(record.run_dir, Some(dir.path().join("checkpoints/run-1")));
        assert!(record.is_active() && record.worker().is_some());

        std::fs::write(layout.pipeline_json(), "{").unwrap();
        let err = PipelineRecord::load(&layout).unwrap_err().to_string();
        assert!(
            err.contains("pipeline.json") && err.contains("move it away"),
            "{err}"
        );
    }

    /// State files written by earlier versions must keep loading after an upgrade,
    /// or a daemon restart would lose track of a running worker.
    #[test]
    fn a_saved_state_file_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("data"), None);
        std::fs::create_dir_all(&layout.state_dir).unwrap();
        std::fs::copy(fixture("pipeline-v1.json"), layout.pipeline_json()).unwrap();
        let r = PipelineRecord::load(&layout).unwrap();
        assert_eq!(r.state.kind(), PipelineState::Running);
        assert_eq!(r.worker().unwrap().handle.pid(), Some(13584));
        assert_eq!(r.step_state(PipelineStep::Downloads), Some(StepState::Done));
        // Steps were written as their lowercase names; they read back as steps.
        assert_eq!(r.active_step, Some(PipelineStep::Train));
        assert_eq!(r.worker().unwrap().step, PipelineStep::Train);
        assert_eq!(r.restarts, 1);
        // Absolute paths of that version stand as written.
        assert_eq!(
            r.run_dir.as_deref(),
            Some(Path::new("/data/checkpoints/run-2026-04-24_16-08-45"))
        );
    }

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    /// A record with absolute paths, written before paths were relative, in a data
    /// root that was moved since: the run, log and resume checkpoint are found
    /// under the new root.
    #[test]
    fn an_old_absolute_record_in_a_moved_root_finds_its_run() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("moved"), None);
        let run = layout.checkpoints_root().join("run-2026-04-24_16-08-45");
        std::fs::create_dir_all(run.join("pretrain-16-09-00-0001")).unwrap();
        std::fs::create_dir_all(layout.logs_dir()).unwrap();
        std::fs::write(
            layout
                .logs_dir()
                .join("pipeline_chunk1_20260424_160845.log"),
            "",
        )
        .unwrap();
        std::fs::create_dir_all(&layout.state_dir).unwrap();
        std::fs::copy(fixture("pipeline-v2-absolute.json"), layout.pipeline_json()).unwrap();
        let r = PipelineRecord::load(&layout).unwrap();
        assert_eq!(r.state.kind(), PipelineState::Stopped);
        assert_eq!(r.run_dir.as_deref(), Some(run.as_path()));
        assert_eq!(
            r.log_file.as_deref(),
            Some(
                layout
                    .logs_dir()
                    .join("pipeline_chunk1_20260424_160845.log")
                    .as_path()
            )
        );
        assert_eq!(
            r.resume_from.as_deref(),
            Some(run.join("pretrain-16-09-00-0001").as_path())
        );
    }

    #[test]
    fn paths_inside_the_data_root_are_saved_relative_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("data"), None);
        std::fs::create_dir_all(&layout.state_dir).unwrap();
        let mut r = PipelineRecord::idle();
        r.run_dir = Some(layout.checkpoints_root().join("run-x"));
        r.log_file = Some(layout.logs_dir().join("pipeline_chunk1_x.log"));
        r.resume_from = Some(PathBuf::from("/elsewhere/ckpt"));
        r.save(&layout).unwrap();
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(layout.pipeline_json()).unwrap()).unwrap();
        assert_eq!(raw["run_dir"], "checkpoints/run-x");
        assert_eq!(raw["log_file"], "logs/pipeline_chunk1_x.log");
        assert_eq!(raw["resume_from"], "/elsewhere/ckpt");
        assert_eq!(PipelineRecord::load(&layout).unwrap(), r);

        // The whole root moves: the record follows.
        let moved = Layout::new(dir.path().join("moved"), None);
        std::fs::rename(&layout.data_root, &moved.data_root).unwrap();
        let back = PipelineRecord::load(&moved).unwrap();
        assert_eq!(back.run_dir, Some(moved.checkpoints_root().join("run-x")));
        assert_eq!(
            back.log_file,
            Some(moved.logs_dir().join("pipeline_chunk1_x.log"))
        );
    }

    #[test]
    fn a_slurm_worker_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = Layout::new(dir.path().to_path_buf(), None);
        std::fs::create_dir_all(&p.state_dir).unwrap();
        let mut r = PipelineRecord::idle();
        r.apply(RecordEvent::WorkerRunning(WorkerRecord {
            handle: WorkerHandle::Slurm {
                slurm: SlurmJob {
                    job_id: "42".into(),
                    node: Some("gpu7".into()),
                    state: Some("RUNNING".into()),
                    seen: Box::new(JobSeen {
                        nodes: vec!["gpu7".into(), "gpu8".into()],
                        message: Some("node gpu8 lost at step 3; waiting for 2 nodes".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            },
            step: PipelineStep::Train,
            started_at: "2026-01-01T00:00:00Z".parse().unwrap(),
            resumed_from_step: Some(40),
        }));
        r.save(&p).unwrap();
        let back = PipelineRecord::load(&p).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.worker().unwrap().handle.pid(), None);
    }

    #[test]
    fn missing_file_is_idle_and_garbage_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = Layout::new(dir.path().to_path_buf(), None);
        assert_eq!(
            PipelineRecord::load(&p).unwrap().state.kind(),
            PipelineState::Idle
        );
        std::fs::create_dir_all(&p.state_dir).unwrap();
        std::fs::write(p.pipeline_json(), "{not json").unwrap();
        let err = format!("{:#}", PipelineRecord::load(&p).unwrap_err());
        assert!(err.contains("pipeline.json"), "{err}");
    }

    /// Each state is saved in the flat form every version reads (`state`, `worker`,
    /// `restart_pending`, `stop_cause`, `disk_wait`), and read back as it was.
    #[test]
    fn each_state_is_saved_in_the_flat_form_and_read_back() {
        use serde_json::{Value, json};
        let worker = WorkerRecord::sample();
        let wait = crate::status::DiskWait {
            path: PathBuf::from("/data"),
            need_bytes: 5,
            free_bytes: Some(1),
            since: "2026-01-01T00:00:00Z".into(),
            message: "full".into(),
        };
        let worker_json = json!({"pid": 7, "start_time": "1", "step": "train",
            "started_at": "2026-01-01T00:00:00.000Z"});
        let wait_json = serde_json::to_value(&wait).unwrap();
        let rows = [
            (RecordState::Idle, json!(["idle", null, false, null, null])),
            (
                RecordState::Running {
                    worker: Some(worker.clone()),
                },
                json!(["running", worker_json, false, null, null]),
            ),
            (
                RecordState::Running { worker: None },
                json!(["running", null, false, null, null]),
            ),
            (
                RecordState::Stopping {
                    cause: Some(StopCause::Operator),
                    worker: Some(worker.clone()),
                },
                json!(["stopping", worker_json, false, "operator", null]),
            ),
            (
                RecordState::Stopped {
                    cause: Some(StopCause::DaemonExit),
                },
                json!(["stopped", null, false, "daemon_exit", null]),
            ),
            (
                RecordState::Stopped { cause: None },
                json!(["stopped", null, false, null, null]),
            ),
            (
                RecordState::Crashed,
                json!(["crashed", null, true, null, null]),
            ),
            (
                RecordState::WaitingForDisk {
                    wait: Some(wait.clone()),
                },
                json!(["waiting_for_disk", null, true, null, wait_json]),
            ),
            (
                RecordState::WaitingForDisk { wait: None },
                json!(["waiting_for_disk", null, true, null, null]),
            ),
            (
                RecordState::Failed,
                json!(["failed", null, false, null, null]),
            ),
            (
                RecordState::Finished,
                json!(["finished", null, false, null, null]),
            ),
        ];
        for (state, want) in rows {
            let r = PipelineRecord {
                state: state.clone(),
                ..PipelineRecord::idle()
            };
            let saved = serde_json::to_value(&r).unwrap();
            let flat: Vec<Value> = [
                "state",
                "worker",
                "restart_pending",
                "stop_cause",
                "disk_wait",
            ]
            .iter()
            .map(|k| saved.get(*k).cloned().unwrap_or(Value::Null))
            .collect();
            assert_eq!(Value::Array(flat), want, "{state:?}");
            let back: PipelineRecord = serde_json::from_value(saved).unwrap();
            assert_eq!(back, r);
        }
    }

    /// What older versions wrote in each state loads as that state, with what it
    /// held: a stop under way with its worker, a crash with its restart due, a disk
    /// wait with its numbers.
    #[test]
    fn older_records_load_in_their_state() {
        let read = |extra: &str| -> PipelineRecord {
            serde_json::from_str(&format!(
                r#"{{"chunk":1,"scale":null,"active_step":"train","run_dir":null,
                    "log_file":null,"resume_from":null,"last_error":null,
                    "updated_at":"2026-01-01T00:00:00Z",{extra}}}"#
            ))
            .unwrap()
        };
        let r = read(
            r#""state":"stopping","stop_cause":"daemon_exit","restart_pending":false,
               "worker":{"pid":7,"start_time":"1","step":"train","started_at":"2026-01-01T00:00:00Z"}"#,
        );
        assert!(matches!(
            r.state,
            RecordState::Stopping {
                cause: Some(StopCause::DaemonExit),
                worker: Some(_)
            }
        ));
        assert!(r.is_active());
        // Before stop causes were kept.
        let r = read(r#""state":"stopped","worker":null,"restart_pending":false"#);
        assert_eq!(r.state, RecordState::Stopped { cause: None });
        let r = read(r#""state":"crashed","worker":null,"restart_pending":true,"restarts":2"#);
        assert_eq!((r.state.clone(), r.restarts), (RecordState::Crashed, 2));
        assert!(r.restart_pending() && r.is_active());
        let r = read(
            r#""state":"waiting_for_disk","worker":null,"restart_pending":true,
               "disk_wait":{"path":"/data","need_bytes":5,"free_bytes":1,
                            "since":"2026-01-01T00:00:00Z","message":"full"}"#,
        );
        assert_eq!(r.disk_wait().map(|w| w.need_bytes), Some(5));
        assert!(r.restart_pending());
    }

    #[test]
    fn save_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = Layout::new(dir.path().to_path_buf(), None);
        std::fs::create_dir_all(&p.state_dir).unwrap();
        let mut r = PipelineRecord::idle();
        r.restarts = 2;
        r.save(&p).unwrap();
        assert_eq!(PipelineRecord::load(&p).unwrap(), r);
    }
}
