//! What a start means concretely: the run prepared (request checked, worker config
//! written, run directory created), which steps still run for this chunk, which
//! checkpoint training resumes from, and the launch of each step.

use std::path::{Path, PathBuf};

use lavender::config::{Config, PipelineStep, Scale};
use lavender::status::{PipelineState, StepState};

use super::handle::StartError;
use super::markers;
use super::record::{PipelineRecord, StepEntry};
use super::request::StartRequest;
use crate::layout::Layout;
use crate::process::SpawnSpec;

/// A start made concrete, before its first step runs.
pub struct Prepared {
    /// The new pipeline's record: running, no step active yet.
    pub record: PipelineRecord,
    pub chunk: u32,
    pub scale: Scale,
    /// Lines for the operator (see [`StartReply::notices`](super::StartReply)).
    pub notices: Vec<String>,
}

/// Prepares the run `req` asks for: checks the request, plans the steps, resolves
/// the checkpoint training resumes from, writes the worker's resolved config and
/// creates the run directory. Nothing is launched.
pub fn prepare(
    layout: &Layout,
    config: &Config,
    req: StartRequest,
) -> Result<Prepared, StartError> {
    req.validate().map_err(StartError::Invalid)?;
    if let Some(root) = &req.data_root
        && !same_path(root, &layout.data_root)
    {
        return Err(StartError::Invalid(format!(
            "this daemon serves data root {}, not {}; start a daemon for that data root (lavenderd --data-root {} serve)",
            layout.data_root.display(),
            root.display(),
            root.display()
        )));
    }
    let chunk = req.chunk.unwrap_or(config.chunk);
    let scale = req.scale.unwrap_or(config.scale);
    let steps = steps(layout, config, chunk, req.skip_train);
    let trains = steps
        .iter()
        .any(|s| s.name == PipelineStep::Train && s.state == StepState::Pending);
    let resume_from = if trains {
        resolve_resume(layout, &req, chunk)?
    } else {
        None
    };

    let mut worker_config = config.clone();
    worker_config.scale = scale;
    worker_config.chunk = chunk;
    let cfg_path = layout.worker_config();
    lavender::atomic::write_file(&cfg_path, worker_config.to_yaml().as_bytes())
        .map_err(|e| StartError::Spawn(e.to_string()))?;
    // Shards already built (build_shards/precompute manifests) that are fewer than
    // the scale asks for are worth a line before the run starts.
    let notices: Vec<String> = lavender::manifest::data_counts(&layout.data_root)
        .get("shards_available")
        .copied()
        .flatten()
        .and_then(|available| worker_config.shard_shortfall(available))
        .map(|short| short.to_string())
        .into_iter()
        .collect();

    let now = lavender::time::now_utc();
    let any_pending = steps.iter().any(|s| s.state == StepState::Pending);
    let run_dir = if any_pending {
        let root = layout.checkpoints_root();
        std::fs::create_dir_all(&root)
            .map_err(|e| StartError::Spawn(format!("create {}: {e}", root.display())))?;
        Some(
            lavender::run::create_run(&root, now)
                .map_err(|e| StartError::Spawn(e.to_string()))?
                .path,
        )
    } else {
        None
    };
    let log_file = layout.logs_dir().join(format!(
        "pipeline_chunk{chunk}_{}.log",
        now.format("%Y%m%d_%H%M%S")
    ));
    let record = PipelineRecord {
        state: PipelineState::Running,
        request: Some(req),
        chunk: Some(chunk),
        scale: Some(scale),
        steps,
        active_step: None,
        run_dir,
        log_file: Some(log_file),
        worker: None,
        restarts: 0,
        resume_from,
        restart_pending: false,
        last_error: None,
        updated_at: String::new(),
    };
    Ok(Prepared {
        record,
        chunk,
        scale,
        notices,
    })
}

/// The configured steps with their starting state for this chunk: done (marker),
/// skipped (`--skip-train`: train and what follows), or pending.
pub fn steps(layout: &Layout, config: &Config, chunk: u32, skip_train: bool) -> Vec<StepEntry> {
    let mut past_train = false;
    config
        .steps
        .iter()
        .map(|&name| {
            past_train |= name == PipelineStep::Train;
            let state = if skip_train && past_train {
                StepState::Skipped
            } else if markers::is_done(layout, chunk, name) {
                StepState::Done
            } else {
                StepState::Pending
            };
            StepEntry { name, state }
        })
        .collect()
}

/// `--resume` made concrete: a given spec must resolve; chunks 2–4 without one
/// continue from the previous chunk's latest checkpoint, which must exist.
pub fn resolve_resume(
    layout: &Layout,
    req: &StartRequest,
    chunk: u32,
) -> Result<Option<PathBuf>, StartError> {
    let root = layout.checkpoints_root();
    if let Some(spec) = &req.resume {
        let resolved = if spec == "latest" {
            spec.clone()
        } else {
            absolute(Path::new(spec)).display().to_string()
        };
        return lavender::checkpoint::resolve_resume(&resolved, &root)
            .map(|c| Some(c.path))
            .map_err(|e| StartError::Invalid(format!("--resume {spec}: {e}")));
    }
    if chunk <= 1 {
        return Ok(None);
    }
    let prev = chunk - 1;
    let marker = markers::read(layout, prev, PipelineStep::Train).ok_or_else(|| {
        StartError::Invalid(format!(
            "chunk {chunk} continues from chunk {prev}'s latest checkpoint, but chunk {prev} has not finished its train step (no done-marker at {}); finish chunk {prev} or pass --resume PATH|latest",
            layout.done_marker(prev, PipelineStep::Train).display()
        ))
    })?;
    let run_dir = marker.run_dir.ok_or_else(|| {
        StartError::Invalid(format!(
            "chunk {prev}'s done-marker names no run directory; pass --resume PATH|latest"
        ))
    })?;
    match lavender::checkpoint::latest_complete(&run_dir) {
        Ok(Some(c)) => Ok(Some(c.path)),
        Ok(None) => Err(StartError::Invalid(format!(
            "chunk {chunk} continues from chunk {prev}, but its run {} has no complete checkpoint; pass --resume PATH",
            run_dir.display()
        ))),
        Err(e) => Err(StartError::Invalid(format!(
            "chunk {chunk} continues from chunk {prev}: {e}; pass --resume PATH"
        ))),
    }
}

/// After a crash, training resumes from the run's own newest complete checkpoint,
/// else from where this pipeline started (a restart must never silently begin at
/// step 0 when a checkpoint was the starting point).
fn crash_resume(record: &PipelineRecord) -> Option<PathBuf> {
    record
        .run_dir
        .as_deref()
        .and_then(|d| lavender::checkpoint::latest_complete(d).ok().flatten())
        .map(|c| c.path)
        .or_else(|| record.resume_from.clone())
}

/// The launch of `step` in the pipeline `record` describes. Training resumes from
/// where the pipeline started, or after a crash from the run's newest checkpoint.
pub fn spawn_spec(
    layout: &Layout,
    config: &Config,
    record: &PipelineRecord,
    step: PipelineStep,
    after_crash: bool,
) -> SpawnSpec {
    let resume = if step != PipelineStep::Train {
        None
    } else if after_crash {
        crash_resume(record)
    } else {
        record.resume_from.clone()
    };
    SpawnSpec {
        command: config.worker.command.clone(),
        step,
        config: layout.worker_config(),
        data_root: layout.data_root.clone(),
        run_dir: record.run_dir.clone(),
        chunk: record.chunk.unwrap_or(config.chunk),
        resume,
        env: config.worker.env.clone(),
        log_file: record
            .log_file
            .clone()
            .unwrap_or_else(|| layout.logs_dir().join("pipeline.log")),
    }
}

pub fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => absolute(a) == absolute(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dir: &Path) -> Layout {
        Layout::new(dir.to_path_buf(), None)
    }

    #[test]
    fn skip_train_skips_train_and_what_follows_and_markers_mean_done() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(dir.path());
        let config = Config::default();
        markers::write(&l, 1, PipelineStep::Downloads, None).unwrap();
        let plan = steps(&l, &config, 1, true);
        let get = |n| plan.iter().find(|s| s.name == n).unwrap().state;
        assert_eq!(get(PipelineStep::Downloads), StepState::Done);
        assert_eq!(get(PipelineStep::Dedup), StepState::Pending);
        assert_eq!(get(PipelineStep::Train), StepState::Skipped);
        assert_eq!(get(PipelineStep::MineHard), StepState::Skipped);
        // Markers are per chunk.
        let plan2 = steps(&l, &config, 2, false);
        assert!(plan2.iter().all(|s| s.state == StepState::Pending));
        assert_eq!(plan.len(), PipelineStep::ALL.len());
    }

    #[test]
    fn a_resume_that_does_not_exist_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let req = StartRequest {
            resume: Some("/no/such/checkpoint".into()),
            ..StartRequest::default()
        };
        let err = resolve_resume(&layout(dir.path()), &req, 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/no/such/checkpoint"), "{err}");
        let req = StartRequest {
            resume: Some("latest".into()),
            ..StartRequest::default()
        };
        let err = resolve_resume(&layout(dir.path()), &req, 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("latest"), "{err}");
    }

    /// The scale travels in one channel: the record says it, the worker's config
    /// file carries it, the argv does not.
    #[test]
    fn the_requested_scale_reaches_the_worker_through_its_config_alone() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(dir.path());
        l.ensure_state_dir().unwrap();
        let config = Config {
            steps: vec![PipelineStep::Train],
            ..Config::default()
        };
        assert_ne!(config.scale, Scale::Small);
        let req = StartRequest {
            scale: Some(Scale::Small),
            ..StartRequest::default()
        };
        let prepared = prepare(&l, &config, req).unwrap();
        assert_eq!(prepared.scale, Scale::Small);
        assert_eq!(prepared.record.scale, Some(Scale::Small));
        let given = Config::load(&lavender::config::LoadOptions {
            file: Some(l.worker_config()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(given.scale, Scale::Small);
        let spec = spawn_spec(&l, &config, &prepared.record, PipelineStep::Train, false);
        assert!(
            !spec.argv().iter().any(|a| a == "--scale"),
            "{:?}",
            spec.argv()
        );
    }

    #[test]
    fn a_launch_carries_the_record_and_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(dir.path());
        let mut config = Config::default();
        config.worker.command = vec!["python".into(), "train.py".into()];
        let mut record = PipelineRecord::idle();
        record.run_dir = Some(dir.path().join("checkpoints/run-x"));
        record.scale = Some(Scale::Small);
        record.chunk = Some(2);
        record.resume_from = Some(PathBuf::from("/ck/a"));
        let spec = spawn_spec(&l, &config, &record, PipelineStep::Train, false);
        assert_eq!(spec.command, ["python", "train.py"]);
        assert_eq!(spec.chunk, 2);
        assert_eq!(spec.run_dir, record.run_dir);
        assert_eq!(spec.config, l.worker_config());
        assert_eq!(spec.resume.as_deref(), Some(Path::new("/ck/a")));
        assert_eq!(spec.log_file, l.logs_dir().join("pipeline.log"));
        // Only training resumes.
        let dedup = spawn_spec(&l, &config, &record, PipelineStep::Dedup, false);
        assert_eq!(dedup.resume, None);
    }
}
