//! A start request resolved once against the config and the pipeline record: the
//! chunk and scale it runs, the step `--force` runs again from, and what training
//! resumes from. Every reader after the request takes this ([`ResolvedStart`]), so
//! "the request's value, else the running pipeline's, else the config's" is said here
//! alone. Pure: nothing is read from disk (the resume target names what the daemon
//! then resolves to a checkpoint).

use crate::config::{Config, PipelineStep, Scale};
use crate::pipeline_file::{PipelineRecord, StartRequest};

/// One start, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedStart {
    pub chunk: u32,
    pub scale: Scale,
    /// With `--force`: the step from which the chunk's steps run again (`--from-step`,
    /// else the config's first step); `None` without `--force`.
    pub force_from: Option<PipelineStep>,
    pub resume: ResumeTarget,
    /// The scale and chunk flags a command that starts the same must carry: those
    /// whose value is not what a start without them would get.
    scale_flag: bool,
    chunk_flag: bool,
}

/// What training resumes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeTarget {
    /// `--resume SPEC` as given: `latest`, a checkpoint, a run directory.
    Given(String),
    /// A chunk after the first continues from the previous chunk's train run.
    PreviousChunk(u32),
    /// Chunk 1 without `--resume`: from step 0.
    StepZero,
}

impl ResolvedStart {
    /// `req` against `config` and `record`: a value the request leaves out is the
    /// active pipeline's (while one runs, a start is asked of it), else the config's.
    pub fn resolve(req: &StartRequest, config: &Config, record: &PipelineRecord) -> ResolvedStart {
        ResolvedStart::resolve_with(req, config, record, record.is_active())
    }

    /// `req` against `config`, taking the record's chunk and scale when `active`.
    fn resolve_with(
        req: &StartRequest,
        config: &Config,
        record: &PipelineRecord,
        active: bool,
    ) -> ResolvedStart {
        let scale = req
            .scale
            .or(record.scale.filter(|_| active))
            .unwrap_or(config.scale);
        let chunk = req
            .chunk
            .or(record.chunk.filter(|_| active))
            .unwrap_or(config.chunk);
        let first = config
            .steps
            .first()
            .copied()
            .unwrap_or(PipelineStep::ALL[0]);
        let resume = match &req.resume {
            Some(spec) => ResumeTarget::Given(spec.clone()),
            None if chunk > 1 => ResumeTarget::PreviousChunk(chunk - 1),
            None => ResumeTarget::StepZero,
        };
        ResolvedStart {
            chunk,
            scale,
            force_from: req.force.then(|| req.from_step.unwrap_or(first)),
            resume,
            scale_flag: scale != config.scale,
            chunk_flag: chunk != config.chunk,
        }
    }

    /// The start the record's pipeline was asked for (its request, resolved while it
    /// runs), for the readers of a pipeline under way: launches, done-markers,
    /// rollbacks.
    pub fn of_record(record: &PipelineRecord, config: &Config) -> ResolvedStart {
        let req = record.request.clone().unwrap_or_default();
        // Its chunk and scale are the record's whatever its state now.
        ResolvedStart::resolve_with(&req, config, record, true)
    }

    /// Whether `step` of `config`'s steps is one `--force` asked to run again.
    pub fn forces(&self, config: &Config, step: PipelineStep) -> bool {
        let Some(from) = self.force_from else {
            return false;
        };
        let pos = |s| config.steps.iter().position(|&x| x == s);
        matches!((pos(from), pos(step)), (Some(f), Some(i)) if i >= f)
    }

    /// ` --scale S --chunk N`, each only where it is not the default: what a command
    /// that starts the same again must say.
    pub fn flags(&self) -> String {
        let mut s = String::new();
        if self.scale_flag {
            s.push_str(&format!(" --scale {}", self.scale));
        }
        if self.chunk_flag {
            s.push_str(&format!(" --chunk {}", self.chunk));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline_file::RecordState;
    use PipelineStep::*;

    fn record(state: RecordState, scale: Scale, chunk: u32) -> PipelineRecord {
        PipelineRecord {
            state,
            scale: Some(scale),
            chunk: Some(chunk),
            ..PipelineRecord::idle()
        }
    }

    /// chunk, scale, force_from, resume, flags.
    type Expected = (u32, Scale, Option<PipelineStep>, ResumeTarget, &'static str);

    /// Each row: the request, the record, and what the start resolves to (chunk,
    /// scale, force_from, resume, the flags a command repeating it carries).
    #[test]
    fn a_start_resolves_against_the_request_the_running_pipeline_and_the_config() {
        let config = Config::default();
        assert_eq!(
            (config.scale, config.chunk),
            (Scale::Tiny, 1),
            "the rows assume"
        );
        let idle = PipelineRecord::idle();
        let stopped = record(RecordState::Stopped { cause: None }, Scale::Large, 3);
        let running = record(RecordState::Running { worker: None }, Scale::Small, 2);
        let req = |f: fn(&mut StartRequest)| {
            let mut r = StartRequest::default();
            f(&mut r);
            r
        };
        use ResumeTarget::*;
        #[rustfmt::skip]
        let rows: Vec<(&str, StartRequest, &PipelineRecord, Expected)> = vec![
            ("nothing asked: the config's", req(|_| {}), &idle, (1, Scale::Tiny, None, StepZero, "")),
            ("a stopped pipeline's values are not a default", req(|_| {}), &stopped, (1, Scale::Tiny, None, StepZero, "")),
            ("a running pipeline's are", req(|_| {}), &running, (2, Scale::Small, None, PreviousChunk(1), " --scale small --chunk 2")),
            ("the request's win", req(|r| { r.scale = Some(Scale::Medium); r.chunk = Some(3) }), &running, (3, Scale::Medium, None, PreviousChunk(2), " --scale medium --chunk 3")),
            ("a flag naming the default is not repeated", req(|r| r.scale = Some(Scale::Tiny)), &idle, (1, Scale::Tiny, None, StepZero, "")),
            ("--resume as given", req(|r| { r.resume = Some("latest".into()); r.chunk = Some(2) }), &idle, (2, Scale::Tiny, None, Given("latest".into()), " --chunk 2")),
            ("--force: from the first step", req(|r| r.force = true), &idle, (1, Scale::Tiny, Some(Downloads), StepZero, "")),
            ("--force --from-step", req(|r| { r.force = true; r.from_step = Some(Train) }), &idle, (1, Scale::Tiny, Some(Train), StepZero, "")),
            ("--from-step without --force forces nothing", req(|r| r.from_step = Some(Train)), &idle, (1, Scale::Tiny, None, StepZero, "")),
        ];
        for (what, req, record, (chunk, scale, force_from, resume, flags)) in rows {
            let got = ResolvedStart::resolve(&req, &config, record);
            assert_eq!(
                (
                    got.chunk,
                    got.scale,
                    got.force_from,
                    got.resume.clone(),
                    got.flags().as_str()
                ),
                (chunk, scale, force_from, resume, flags),
                "{what}"
            );
        }
    }

    #[test]
    fn a_records_start_keeps_its_chunk_and_scale_in_any_state_and_forces_from_its_step() {
        let config = Config::default();
        let mut rec = record(RecordState::Failed, Scale::Small, 2);
        rec.request = Some(StartRequest {
            force: true,
            from_step: Some(Precompute),
            ..StartRequest::default()
        });
        let got = ResolvedStart::of_record(&rec, &config);
        assert_eq!((got.chunk, got.scale), (2, Scale::Small));
        assert!(!got.forces(&config, BuildShards));
        assert!(got.forces(&config, Precompute) && got.forces(&config, MineHard));
        let unforced = ResolvedStart::of_record(
            &record(RecordState::Running { worker: None }, Scale::Tiny, 1),
            &config,
        );
        assert!(!unforced.forces(&config, Downloads));
    }
}
