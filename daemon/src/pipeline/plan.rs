//! What a start means concretely: the run prepared (request checked, worker config
//! written, run directory created), which steps still run for this chunk, which
//! checkpoint training resumes from, and the launch of each step.

use std::path::{Path, PathBuf};

use lavender::config::{Config, ConfigOrigins, ORIGINS_VAR, Origin, PipelineStep, Scale};
use lavender::status::StepState;

use super::handle::StartError;
use crate::process::SpawnSpec;
use lavender::checkpoint::fallback::Candidates;
use lavender::layout::Layout;
use lavender::pipeline_file::{PipelineRecord, RecordState};
use lavender::steps::inputs::LocalFiles;
use lavender::steps::start::{ResolvedStart, ResumeTarget};
use lavender::steps::{Planned, absolute, markers, plan_steps, resumable, same_path};
use lavender_api::StartRequest;

/// A start made concrete, before its first step runs.
pub struct Prepared {
    /// The new pipeline's record: running, no step active yet.
    pub record: PipelineRecord,
    pub chunk: u32,
    pub scale: Scale,
    /// Lines for the operator (see [`StartReply::notices`](lavender_api::StartReply)).
    pub notices: Vec<String>,
    /// The config this start runs with, against the last start's (see
    /// [`StartReply::config`](lavender_api::StartReply)).
    pub config_line: String,
}

/// What a start runs with: the config, where each of its values was set (when
/// known), and its steps' local files as fingerprinted off the actor.
pub struct StartConfig<'a> {
    pub config: &'a Config,
    pub origins: Option<&'a ConfigOrigins>,
    pub files: &'a LocalFiles,
}

/// Prepares the run `req` asks for: checks the request, plans the steps, resolves
/// the checkpoint training resumes from, writes the worker's resolved config (and
/// beside it where each value was set, for the worker's errors) and creates the run
/// directory. Nothing is launched.
pub fn prepare(
    layout: &Layout,
    start: StartConfig<'_>,
    current: &PipelineRecord,
    req: StartRequest,
) -> Result<Prepared, StartError> {
    let StartConfig {
        config,
        origins,
        files,
    } = start;
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
    let resolved = ResolvedStart::resolve(&req, config, current);
    let (chunk, scale) = (resolved.chunk, resolved.scale);
    if let Some(from) = req.from_step
        && !config.steps.contains(&from)
    {
        return Err(StartError::Invalid(config.not_a_step(from.as_str())));
    }
    let mut worker_config = config.clone();
    worker_config.scale = scale;
    worker_config.chunk = chunk;
    let origins = origins.map(|o| flagged_origins(o, &req));
    // Another scale than the file's may not fit its other values (training.seq_len
    // against the scale's context length): said here, not by the worker.
    worker_config.validate().map_err(|e| {
        let e = match &origins {
            Some(o) => o.relocate(e),
            None => e,
        };
        StartError::Invalid(e.to_string())
    })?;
    let force_from = resolved.force_from;
    let Planned {
        steps,
        notices: mut plan_notices,
    } = plan_steps(
        layout,
        &worker_config,
        chunk,
        req.skip_train,
        force_from,
        files,
    );
    let trains = steps
        .iter()
        .any(|s| s.name == PipelineStep::Train && s.state == StepState::Pending);
    if trains
        && req.resume.is_none()
        && !req.fresh
        && let Some(run) = resumable::find(layout, current, chunk)
    {
        return Err(StartError::Resumable {
            message: run.refusal(layout, &resolved),
            run_dir: run.run_dir.clone(),
            resume_command: run.resume_command(&resolved),
            fresh_command: run.fresh_command(&resolved),
        });
    }
    let resume_from = if trains {
        resolve_resume(layout, &resolved)?
    } else {
        None
    };

    let cfg_path = layout.worker_config();
    let config_notice = crate::config_source::start_notice(
        req.config.as_ref().map(|c| c.path.as_path()),
        last_worker_config(layout).as_ref(),
        &worker_config,
    );
    lavender::atomic::write_file(&cfg_path, worker_config.to_yaml().as_bytes())
        .map_err(|e| StartError::Spawn(e.to_string()))?;
    write_origins(layout, origins.as_ref()).map_err(StartError::Spawn)?;
    // Shards already built (build_shards/precompute manifests) that are fewer than
    // the scale asks for are worth a line before the run starts.
    let mut notices: Vec<String> = lavender::manifest::data_counts(&layout.data_root)
        .get("shards_available")
        .copied()
        .flatten()
        .and_then(|available| worker_config.shard_shortfall(available))
        .map(|short| short.to_string())
        .into_iter()
        .collect();
    notices.append(&mut plan_notices);

    let now = lavender::time::now_utc();
    let any_pending = steps.iter().any(|s| s.state == StepState::Pending);
    let run_dir = if any_pending {
        let root = layout.checkpoints_root();
        std::fs::create_dir_all(&root)
            .map_err(|e| StartError::Spawn(format!("create {}: {e}", root.display())))?;
        let dir = lavender::run::create_run(&root, now)
            .map_err(|e| StartError::Spawn(e.to_string()))?
            .path;
        // Read back from its first save on: nothing older goes before something newer
        // is verified, whoever prunes (retention: worker included).
        lavender::checkpoint::verdicts::watch(&dir)
            .map_err(|e| StartError::Spawn(e.to_string()))?;
        Some(dir)
    } else {
        None
    };
    // A resume opens a new run: it names the run and checkpoint it continues.
    if let (Some(dir), Some(from)) = (&run_dir, &resume_from) {
        lavender::run::record_parent(dir, from).map_err(|e| StartError::Spawn(e.to_string()))?;
    }
    let log_file = layout.logs_dir().join(format!(
        "pipeline_chunk{chunk}_{}.log",
        now.format("%Y%m%d_%H%M%S")
    ));
    let record = PipelineRecord {
        state: RecordState::Running { worker: None },
        request: Some(req),
        chunk: Some(chunk),
        scale: Some(scale),
        steps,
        active_step: None,
        run_dir,
        log_file: Some(log_file),
        resume_from,
        ..PipelineRecord::idle()
    };
    Ok(Prepared {
        record,
        chunk,
        scale,
        notices,
        config_line: config_notice,
    })
}

/// `origins` with the keys the start request sets (`--scale`, `--chunk`) named by
/// their flag.
fn flagged_origins(origins: &ConfigOrigins, req: &StartRequest) -> ConfigOrigins {
    let mut origins = origins.clone();
    if let Some(scale) = req.scale {
        origins.set(
            "scale",
            Origin::Flag(format!("lavenderd start --scale {scale}")),
        );
    }
    if let Some(chunk) = req.chunk {
        origins.set(
            "chunk",
            Origin::Flag(format!("lavenderd start --chunk {chunk}")),
        );
    }
    origins
}

/// Writes where each value of the worker's config was set beside it (the worker
/// names the operator's file and line in its errors about them), or removes a stale
/// one when that is not known.
fn write_origins(layout: &Layout, origins: Option<&ConfigOrigins>) -> Result<(), String> {
    let path = layout.worker_config_origins();
    match origins {
        Some(o) => {
            lavender::atomic::write_file(&path, o.to_json().as_bytes()).map_err(|e| e.to_string())
        }
        None => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("remove {}: {e}", path.display()))
            }
            _ => Ok(()),
        },
    }
}

/// The config the worker of the current pipeline was given (`state/pipeline-config.yaml`),
/// else `fallback`: a step's inputs are taken from what it ran with.
pub fn worker_config(layout: &Layout, fallback: &Config) -> Config {
    last_worker_config(layout).unwrap_or_else(|| fallback.clone())
}

/// The config the last start gave its worker, if one did. Its paths are absolute
/// (resolved where the operator's file was loaded), so it reads the same from here.
pub fn last_worker_config(layout: &Layout) -> Option<Config> {
    let path = layout.worker_config();
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| Config::from_yaml_str(&text, &path.display().to_string()).ok())
}

/// `--resume` made concrete: a given spec must resolve; chunks 2–4 without one
/// continue from the previous chunk's latest checkpoint, which must exist.
pub fn resolve_resume(
    layout: &Layout,
    start: &ResolvedStart,
) -> Result<Option<PathBuf>, StartError> {
    let root = layout.checkpoints_root();
    let chunk = start.chunk;
    let prev = match &start.resume {
        ResumeTarget::StepZero => return Ok(None),
        ResumeTarget::PreviousChunk(prev) => *prev,
        ResumeTarget::Given(spec) => {
            let resolved = if spec == "latest" {
                spec.clone()
            } else {
                absolute(Path::new(spec)).display().to_string()
            };
            return lavender::checkpoint::resolve_resume(&resolved, &root)
                .map(|c| Some(c.path))
                .map_err(|e| StartError::Invalid(format!("--resume {spec}: {e}")));
        }
    };
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

/// The checkpoint a launch of `step` resumes from, before the launch checks it:
/// where the pipeline started, or after a crash the run's newest checkpoint.
pub fn launch_resume(
    record: &PipelineRecord,
    step: PipelineStep,
    after_crash: bool,
) -> Option<PathBuf> {
    if step != PipelineStep::Train {
        None
    } else if after_crash {
        crash_resume(record)
    } else {
        record.resume_from.clone()
    }
}

/// The checkpoints a training launch may resume from, newest first
/// (`lavender::checkpoint::fallback` walks them at launch, setting aside the damaged
/// ones): after a crash the run's own, then where the pipeline started; at a start,
/// what `--resume` named (`latest` and a chunk's continuation walk back from it).
pub fn resume_candidates(
    layout: &Layout,
    record: &PipelineRecord,
    step: PipelineStep,
    after_crash: bool,
) -> Candidates {
    let from = record.resume_from.clone();
    if step != PipelineStep::Train {
        return Candidates::None;
    }
    if after_crash && let Some(run_dir) = record.run_dir.clone() {
        return Candidates::Run {
            run_dir,
            then: from,
        };
    }
    let Some(target) = from else {
        return Candidates::None;
    };
    match record.request.as_ref().and_then(|r| r.resume.as_deref()) {
        Some("latest") => Candidates::UpTo {
            target,
            root: layout.checkpoints_root(),
            within_run: false,
        },
        Some(_) => Candidates::Exact(target),
        None => Candidates::UpTo {
            target,
            root: layout.checkpoints_root(),
            within_run: true,
        },
    }
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
    let resume = launch_resume(record, step, after_crash);
    let mut env = config.worker.env.clone();
    let origins = layout.worker_config_origins();
    if origins.is_file() {
        // The worker names where a value was set in its errors about it.
        env.insert(ORIGINS_VAR.to_string(), origins.display().to_string());
    }
    if ResolvedStart::of_record(record, config).forces(config, step) {
        // The worker's data steps rebuild their outputs even when up to date.
        env.insert(FORCE_VAR.to_string(), "true".to_string());
    }
    SpawnSpec {
        command: config.worker.command.clone(),
        step,
        config: layout.worker_config(),
        data_root: layout.data_root.clone(),
        run_dir: record.run_dir.clone(),
        chunk: ResolvedStart::of_record(record, config).chunk,
        resume,
        env,
        log_file: record
            .log_file
            .clone()
            .unwrap_or_else(|| layout.logs_dir().join("pipeline.log")),
        log_rotation: config.logging,
        progress_every: config.training.log_every,
    }
}

/// Set (to `true`) in the environment of a step `start --force` runs again:
/// `lavender-worker` then rebuilds the step's outputs even when they are up to date.
pub const FORCE_VAR: &str = "LAVENDER_FORCE";

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dir: &Path) -> Layout {
        Layout::new(dir.to_path_buf(), None)
    }

    #[test]
    fn a_resume_that_does_not_exist_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let req = StartRequest {
            resume: Some("/no/such/checkpoint".into()),
            ..StartRequest::default()
        };
        let resolved =
            |req| ResolvedStart::resolve(&req, &Config::default(), &PipelineRecord::idle());
        let err = resolve_resume(&layout(dir.path()), &resolved(req))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/no/such/checkpoint"), "{err}");
        let req = StartRequest {
            resume: Some("latest".into()),
            ..StartRequest::default()
        };
        let err = resolve_resume(&layout(dir.path()), &resolved(req))
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
        let start = StartConfig {
            config: &config,
            origins: None,
            files: &LocalFiles::read(&config),
        };
        let prepared = prepare(&l, start, &PipelineRecord::idle(), req).unwrap();
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

    /// The worker's config goes with where each value was set (the operator's file
    /// and line, the start's flags), which the worker names in its errors; a scale
    /// that does not fit the file's values is refused before any launch, naming
    /// the file's line.
    #[test]
    fn the_worker_is_told_where_each_value_was_set_and_a_scale_that_does_not_fit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(&dir.path().join("data"));
        l.ensure_state_dir().unwrap();
        let file = dir.path().join("lavender.yaml");
        std::fs::write(
            &file,
            "steps: [train]\nscale: small\ntraining:\n  seq_len: 256\n",
        )
        .unwrap();
        let (config, origins) = Config::load_located(&lavender::config::LoadOptions {
            file: Some(file.clone()),
            ..Default::default()
        })
        .unwrap();
        let files = LocalFiles::read(&config);
        let start = |origins| StartConfig {
            config: &config,
            origins,
            files: &files,
        };
        let at = |scale| StartRequest {
            scale: Some(scale),
            ..StartRequest::default()
        };
        let line4 = format!("{}:4:", file.display());

        // Scale tiny's context (128) is shorter than the file's seq_len.
        match prepare(
            &l,
            start(Some(&origins)),
            &PipelineRecord::idle(),
            at(Scale::Tiny),
        ) {
            Err(StartError::Invalid(m)) => assert!(
                m.starts_with(&line4) && m.contains("training.seq_len: 256 is out of range"),
                "{m}"
            ),
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("scale tiny was accepted with seq_len 256"),
        }
        assert!(
            !l.worker_config().exists(),
            "nothing is written for a refused start"
        );

        let prepared = prepare(
            &l,
            start(Some(&origins)),
            &PipelineRecord::idle(),
            at(Scale::Small),
        )
        .unwrap();
        let text = std::fs::read_to_string(l.worker_config_origins()).unwrap();
        let written = ConfigOrigins::from_json(&text).unwrap();
        assert_eq!(
            written.of("scale").unwrap().to_string(),
            "`lavenderd start --scale small`"
        );
        assert!(
            written
                .of("training.seq_len")
                .unwrap()
                .to_string()
                .starts_with(&line4),
            "{text}"
        );
        let spec = spawn_spec(&l, &config, &prepared.record, PipelineStep::Train, false);
        let named = l.worker_config_origins().display().to_string();
        assert_eq!(spec.env.get(ORIGINS_VAR), Some(&named));

        // Not known (no config file): the stale file is removed, the worker told nothing.
        let prepared = prepare(&l, start(None), &PipelineRecord::idle(), at(Scale::Small)).unwrap();
        assert!(!l.worker_config_origins().exists());
        let spec = spawn_spec(&l, &config, &prepared.record, PipelineStep::Train, false);
        assert_eq!(spec.env.get(ORIGINS_VAR), None);
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
