//! The configured steps as the files say they stand, for a start: which are done
//! (a done-marker whose recorded inputs are still the step's: [`markers`],
//! [`inputs`], [`files`]), which run again, whether a start has nothing to do, and
//! the unfinished run a start without `--resume` would walk away from
//! ([`resumable`]). Read alike by the daemon when it starts a pipeline and by
//! `lavenderd start` before any daemon is asked.

pub mod files;
pub mod inputs;
pub mod markers;
pub mod resumable;
pub mod start;

use std::path::{Path, PathBuf};

use crate::config::{Config, PipelineStep};
use crate::layout::Layout;
use crate::pipeline_file::{PipelineRecord, StartRequest, StepEntry};
use crate::status::StepState;
use inputs::{LocalFiles, StepInputs};

/// A start that would run nothing: every step of its chunk finished with the inputs
/// it has now, and no `--force`. The one line that says so (the start then does
/// nothing else: no new run, no "finished" push, no pruning); `None` when the start
/// has something to do, or is refused by the daemon's `prepare` anyway.
pub fn nothing_to_do(
    layout: &Layout,
    config: &Config,
    files: &LocalFiles,
    current: &PipelineRecord,
    req: &StartRequest,
) -> Option<String> {
    let foreign_root = req
        .data_root
        .as_deref()
        .is_some_and(|root| !same_path(root, &layout.data_root));
    if req.force || foreign_root || req.validate().is_err() || current.is_active() {
        return None;
    }
    let start::ResolvedStart { chunk, scale, .. } =
        start::ResolvedStart::resolve(req, config, current);
    // Another scale or chunk than the pipeline last ran is work to do, even where the
    // steps' markers are all there.
    if current.scale.is_some_and(|s| s != scale) || current.chunk.is_some_and(|c| c != chunk) {
        return None;
    }
    let mut worker_config = config.clone();
    worker_config.scale = scale;
    worker_config.chunk = chunk;
    let planned = plan_steps(layout, &worker_config, chunk, req.skip_train, None, files);
    if planned.steps.iter().any(|s| s.state == StepState::Pending) {
        return None;
    }
    let run = current
        .run_dir
        .as_deref()
        .filter(|_| current.chunk == Some(chunk))
        .map(|d| format!(" (run {})", layout.to_recorded(d).display()))
        .unwrap_or_default();
    Some(format!(
        "nothing to do: chunk {chunk} at scale {scale} has finished every step{run}; `lavenderd start --force` runs them again"
    ))
}

/// The steps of a start and what to tell the operator about them.
pub struct Planned {
    pub steps: Vec<StepEntry>,
    /// Which finished steps run again, and why (inputs changed, `--force`).
    pub notices: Vec<String>,
}

/// The configured steps with their starting state for this chunk: skipped
/// (`--skip-train`: train and what follows), done (a done-marker whose recorded inputs
/// are still the step's inputs), or pending. From the first done step whose inputs
/// changed since it ran, or from `force_from`, every step runs again. `files`: the
/// local files of `config`'s steps ([`LocalFiles::read`]).
pub fn plan_steps(
    layout: &Layout,
    config: &Config,
    chunk: u32,
    skip_train: bool,
    force_from: Option<PipelineStep>,
    files: &LocalFiles,
) -> Planned {
    let mut past_train = false;
    let mut rerun = false;
    let mut notices = Vec::new();
    let mut again: Vec<PipelineStep> = Vec::new();
    let mut steps = Vec::new();
    for &name in &config.steps {
        past_train |= name == PipelineStep::Train;
        if skip_train && past_train {
            // A skipped step does not run, whatever changed since it ran.
            steps.push(StepEntry {
                name,
                state: StepState::Skipped,
            });
            continue;
        }
        if force_from == Some(name) && !rerun {
            rerun = true;
            notices.push(format!("--force: the steps from {name} on run again"));
        }
        let marker = markers::read(layout, chunk, name);
        if !rerun && let Some(recorded) = marker.as_ref().and_then(|m| m.inputs.as_ref()) {
            let changed = StepInputs::with_files(name, config, &layout.data_root, chunk, files)
                .changed_since(recorded);
            if !changed.is_empty() {
                rerun = true;
                notices.push(format!(
                    "{name} runs again: {} since it ran at {}",
                    changed.join(", "),
                    marker.as_ref().map_or("?", |m| m.finished_at.as_str())
                ));
            }
        }
        let state = if marker.is_some() && !rerun {
            StepState::Done
        } else {
            if marker.is_some() {
                again.push(name);
            }
            StepState::Pending
        };
        steps.push(StepEntry { name, state });
    }
    if let Some(last) = notices.last_mut()
        && !again.is_empty()
    {
        let names: Vec<&str> = again.iter().map(|s| s.as_str()).collect();
        last.push_str(&format!("; finished steps run again: {}", names.join(", ")));
    }
    Planned { steps, notices }
}

/// `p` made absolute against the working directory (as it is, when that fails).
pub fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The same place on disk: both canonicalized, else both made absolute.
pub fn same_path(a: &Path, b: &Path) -> bool {
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
        markers::write(&l, 1, PipelineStep::Downloads, None, None).unwrap();
        let plan = plan_steps(&l, &config, 1, true, None, &LocalFiles::read(&config)).steps;
        let get = |n| plan.iter().find(|s| s.name == n).unwrap().state;
        assert_eq!(get(PipelineStep::Downloads), StepState::Done);
        assert_eq!(get(PipelineStep::Dedup), StepState::Pending);
        assert_eq!(get(PipelineStep::Train), StepState::Skipped);
        assert_eq!(get(PipelineStep::MineHard), StepState::Skipped);
        // Markers are per chunk.
        let plan2 = plan_steps(&l, &config, 2, false, None, &LocalFiles::read(&config)).steps;
        assert!(plan2.iter().all(|s| s.state == StepState::Pending));
        assert_eq!(plan.len(), PipelineStep::ALL.len());
    }

    /// Markers as the actor writes them: each step's inputs at the time.
    fn finish_all(l: &Layout, config: &Config) {
        for &step in &config.steps {
            let inputs = StepInputs::of(step, config, &l.data_root, 1);
            markers::write(l, 1, step, None, Some(inputs)).unwrap();
        }
    }

    /// The names of the steps from `first` on, as a notice lists them.
    fn names_from(first: PipelineStep) -> String {
        let names: Vec<&str> = PipelineStep::ALL[first as usize..]
            .iter()
            .map(|s| s.as_str())
            .collect();
        names.join(", ")
    }

    fn states(plan: &Planned) -> Vec<(PipelineStep, StepState)> {
        plan.steps.iter().map(|s| (s.name, s.state)).collect()
    }

    #[test]
    fn a_step_whose_inputs_changed_runs_again_with_every_step_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(dir.path());
        let config = Config::default();
        finish_all(&l, &config);
        let same = plan_steps(&l, &config, 1, false, None, &LocalFiles::read(&config));
        assert!(same.steps.iter().all(|s| s.state == StepState::Done));
        assert!(same.notices.is_empty(), "{:?}", same.notices);

        let mut changed = config.clone();
        changed.data.filter.min_chars = 50;
        changed.training.log_every = 99; // read by no step's outputs
        let plan = plan_steps(&l, &changed, 1, false, None, &LocalFiles::read(&changed));
        let pending_from = plan
            .steps
            .iter()
            .position(|s| s.state == StepState::Pending)
            .unwrap();
        assert_eq!(plan.steps[pending_from].name, PipelineStep::Filter);
        assert!(
            plan.steps[pending_from..]
                .iter()
                .all(|s| s.state == StepState::Pending)
        );
        assert_eq!(plan.notices.len(), 1, "{:?}", plan.notices);
        let line = &plan.notices[0];
        assert!(
            line.starts_with("filter runs again: data.filter changed since it ran at ")
                && line.ends_with(&format!(
                    "; finished steps run again: {}",
                    names_from(PipelineStep::Filter)
                )),
            "{line}"
        );
    }

    #[test]
    fn force_from_a_step_runs_it_and_the_rest_again() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(dir.path());
        let config = Config::default();
        finish_all(&l, &config);
        let plan = plan_steps(
            &l,
            &config,
            1,
            false,
            Some(PipelineStep::Train),
            &LocalFiles::read(&config),
        );
        let want: Vec<_> = PipelineStep::ALL
            .into_iter()
            .map(|s| {
                let state = if s < PipelineStep::Train {
                    StepState::Done
                } else {
                    StepState::Pending
                };
                (s, state)
            })
            .collect();
        assert_eq!(states(&plan), want);
        assert_eq!(
            plan.notices,
            [
                "--force: the steps from train on run again; finished steps run again: train, mine_hard"
            ]
        );
        assert!(
            config
                .not_a_step("trian")
                .ends_with(&format!("its steps are {}", PipelineStep::names()))
        );
    }
}
