//! What a start means concretely: which steps still run for this chunk, which
//! checkpoint training resumes from, and the launch of each step.

use std::path::{Path, PathBuf};

use lavender::config::{Config, PipelineStep};
use lavender::status::StepState;

use super::actor::StartError;
use super::markers;
use super::record::{PipelineRecord, StepEntry};
use super::request::StartRequest;
use crate::layout::Layout;
use crate::process::SpawnSpec;

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
pub fn crash_resume(record: &PipelineRecord) -> Option<PathBuf> {
    record
        .run_dir
        .as_deref()
        .and_then(|d| lavender::checkpoint::latest_complete(d).ok().flatten())
        .map(|c| c.path)
        .or_else(|| record.resume_from.clone())
}

/// The launch of `step` in the pipeline `record` describes, resuming from `resume`.
pub fn spawn_spec(
    layout: &Layout,
    config: &Config,
    record: &PipelineRecord,
    step: PipelineStep,
    resume: Option<PathBuf>,
) -> SpawnSpec {
    SpawnSpec {
        command: config.worker.command.clone(),
        step,
        config: layout.worker_config(),
        data_root: layout.data_root.clone(),
        run_dir: record.run_dir.clone(),
        scale: record
            .scale
            .clone()
            .unwrap_or_else(|| config.scale.to_string()),
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

    #[test]
    fn a_launch_carries_the_record_and_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(dir.path());
        let mut config = Config::default();
        config.worker.command = vec!["python".into(), "train.py".into()];
        let mut record = PipelineRecord::idle();
        record.run_dir = Some(dir.path().join("checkpoints/run-x"));
        record.scale = Some("small".into());
        record.chunk = Some(2);
        let spec = spawn_spec(
            &l,
            &config,
            &record,
            PipelineStep::Train,
            Some(PathBuf::from("/ck/a")),
        );
        assert_eq!(spec.command, ["python", "train.py"]);
        assert_eq!((spec.scale.as_str(), spec.chunk), ("small", 2));
        assert_eq!(spec.run_dir, record.run_dir);
        assert_eq!(spec.config, l.worker_config());
        assert_eq!(spec.resume.as_deref(), Some(Path::new("/ck/a")));
        assert_eq!(spec.log_file, l.logs_dir().join("pipeline.log"));
    }
}
