//! The run a `start` without `--resume` would walk away from: the newest run under
//! `checkpoints/` that has a complete checkpoint, when its training did not finish
//! (no train done-marker names it and its heartbeat does not say `finished`) and it
//! trained this chunk. Such a start is refused with the command that resumes it and
//! the flag that starts over (`--fresh`).
//!
//! Only the newest run counts: once a newer run has checkpoints of its own (a start
//! over, a later chunk), an older unfinished one is history, not work in progress.

use std::path::{Path, PathBuf};

use crate::config::PipelineStep;
use crate::heartbeat::WorkerState;
use serde::Deserialize;

use super::markers;
use crate::layout::Layout;
use crate::pipeline_file::MAX_CHUNK;
use crate::pipeline_file::PipelineRecord;
use crate::steps::start::ResolvedStart;

/// An unfinished run that `start --resume` would continue.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumable {
    pub run_dir: PathBuf,
    /// Its newest complete checkpoint's name and step.
    pub checkpoint: String,
    pub step: u64,
    /// `latest` resolves to that checkpoint, so `--resume latest` continues it.
    pub latest_is_it: bool,
}

/// The part of a run's `config.yaml` that says which chunk it trained.
#[derive(Deserialize)]
struct RunChunk {
    chunk: Option<u32>,
}

/// The chunk `run_dir` trained: the pipeline record's when it is that record's run,
/// else its `config.yaml`'s; `None` when neither says.
fn chunk_of(run_dir: &Path, record: &PipelineRecord) -> Option<u32> {
    if record.run_dir.as_deref() == Some(run_dir) && record.chunk.is_some() {
        return record.chunk;
    }
    let text = std::fs::read_to_string(run_dir.join("config.yaml")).ok()?;
    serde_saphyr::from_str::<RunChunk>(&text).ok()?.chunk
}

/// The run a start of `chunk` would abandon, if there is one (see the module's doc).
pub fn find(layout: &Layout, record: &PipelineRecord, chunk: u32) -> Option<Resumable> {
    let root = layout.checkpoints_root();
    let (run, newest) = crate::run::list_runs(&root)
        .ok()?
        .into_iter()
        .find_map(|r| {
            let c = crate::checkpoint::latest_complete(&r.path).ok()??;
            Some((r.path, c))
        })?;
    let finished_by_marker = (1..=MAX_CHUNK).any(|c| {
        markers::read(layout, c, PipelineStep::Train)
            .and_then(|m| m.run_dir)
            .is_some_and(|d| same_dir(&d, &run))
    });
    let finished_by_heartbeat = crate::heartbeat::read(&crate::heartbeat::path(&run))
        .is_ok_and(|hb| hb.state == WorkerState::Finished);
    if finished_by_marker || finished_by_heartbeat {
        return None;
    }
    if chunk_of(&run, record).is_some_and(|c| c != chunk) {
        return None;
    }
    let latest_is_it =
        crate::checkpoint::resolve_resume("latest", &root).is_ok_and(|c| c.path == newest.path);
    Some(Resumable {
        run_dir: run,
        checkpoint: newest.name,
        step: newest.state.step,
        latest_is_it,
    })
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

impl Resumable {
    /// `lavenderd start … --resume …` with the start's scale and chunk.
    pub fn resume_command(&self, start: &ResolvedStart) -> String {
        let resume = if self.latest_is_it {
            "latest".to_string()
        } else {
            self.run_dir.display().to_string()
        };
        format!("lavenderd start{} --resume {resume}", start.flags())
    }

    /// `lavenderd start … --fresh`.
    pub fn fresh_command(&self, start: &ResolvedStart) -> String {
        format!("lavenderd start{} --fresh", start.flags())
    }

    /// One line: the run, how far it got, and both ways on.
    pub fn refusal(&self, layout: &Layout, start: &ResolvedStart) -> String {
        format!(
            "{} holds an unfinished run (newest checkpoint {} at step {}); resume it with `{}`, or start over from step 0 in a new run with `{}`",
            layout.to_recorded(&self.run_dir).display(),
            self.checkpoint,
            self.step,
            self.resume_command(start),
            self.fresh_command(start)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::CheckpointBuilder;
    use crate::checkpoint::CheckpointName;
    use crate::trainer_state::TrainerState;

    fn run_with_checkpoint(layout: &Layout, name: &str, step: u64) -> PathBuf {
        let run = layout.checkpoints_root().join(name);
        std::fs::create_dir_all(&run).unwrap();
        let ck = CheckpointName::new(
            "pretrain",
            chrono::NaiveTime::from_hms_opt(12, 0, 0).unwrap(),
            1,
        )
        .unwrap();
        let b = CheckpointBuilder::begin(&run, &ck).unwrap();
        b.commit(&TrainerState::new("pretrain", step)).unwrap();
        run
    }

    #[test]
    fn the_newest_unfinished_run_of_this_chunk_is_resumable() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().to_path_buf(), None);
        let idle = PipelineRecord::idle();
        assert_eq!(find(&layout, &idle, 1), None, "no run yet");
        let old = run_with_checkpoint(&layout, "run-2026-01-01_00-00-00", 30);
        let r = find(&layout, &idle, 1).expect("an unfinished run");
        assert_eq!((r.run_dir.as_path(), r.step), (old.as_path(), 30));
        assert!(r.latest_is_it);
        // The commands carry the start's flags that are not the config's default.
        let req = crate::pipeline_file::StartRequest {
            chunk: Some(2),
            scale: Some(crate::config::Scale::Tiny),
            ..Default::default()
        };
        let start = ResolvedStart::resolve(&req, &crate::config::Config::default(), &idle);
        let line = r.refusal(&layout, &start);
        assert!(
            line.contains("checkpoints/run-2026-01-01_00-00-00")
                && line.contains("`lavenderd start --chunk 2 --resume latest`")
                && line.contains("`lavenderd start --chunk 2 --fresh`"),
            "{line}"
        );
        // A newer run without a checkpoint yet changes nothing.
        std::fs::create_dir_all(layout.checkpoints_root().join("run-2026-01-02_00-00-00")).unwrap();
        assert!(find(&layout, &idle, 1).is_some());
        // The run of another chunk is not this start's to resume.
        let mut record = PipelineRecord::idle();
        record.run_dir = Some(old.clone());
        record.chunk = Some(2);
        assert_eq!(find(&layout, &record, 1), None);
        // Finished: a train done-marker names it.
        markers::write(&layout, 1, PipelineStep::Train, Some(&old), None).unwrap();
        assert_eq!(find(&layout, &idle, 1), None);
    }

    #[test]
    fn a_finished_newer_run_makes_an_older_unfinished_one_history() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().to_path_buf(), None);
        run_with_checkpoint(&layout, "run-2026-01-01_00-00-00", 30);
        let newer = run_with_checkpoint(&layout, "run-2026-01-02_00-00-00", 90);
        let hb = serde_json::json!({"step": 90, "total_steps": 90, "stage": "dpo",
            "timestamp": "2026-01-02T00:10:00Z", "pid": 1, "state": "finished"});
        std::fs::write(crate::heartbeat::path(&newer), hb.to_string()).unwrap();
        assert_eq!(find(&layout, &PipelineRecord::idle(), 1), None);
    }
}
