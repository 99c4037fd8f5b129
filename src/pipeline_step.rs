//! The pipeline's steps: one enum, and one table ([`STEPS`]) that says for each step
//! what it is (data, train, mine), which config keys its outputs depend on, which
//! steps' outputs and which local files it reads, and how a hang of it is watched.
//! The config's `steps:` list, the done-markers' inputs (`steps::inputs`), the hang
//! watch (`stall`), the worker's command line (`lavender-worker <step> …`), where each
//! step's manifest lives and the status's `data` counts (`manifest`) all read this
//! table. A leaf but for the data root's folder names (`data_root`, itself a leaf),
//! so the config and `steps` can both take it without a circle.

use std::fmt;

use crate::data_root;

use serde::{Deserialize, Serialize};

/// The pipeline's steps, in their usual order; the worker takes the name as argv.
/// Each has its row in [`STEPS`] (at its own index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PipelineStep {
    Downloads,
    Dedup,
    Filter,
    BuildShards,
    Stats,
    Precompute,
    Train,
    MineHard,
}

/// What a step does, which decides how the worker runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Reads the data root, writes its outputs there with a manifest last.
    Data,
    /// The trainer: checkpoints, heartbeats, events in a run directory.
    Train,
    /// Scores training windows with a checkpoint and keeps the hardest.
    Mine,
}

/// How the daemon tells a step that hangs from one that works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HangWatch {
    /// The trainer's `heartbeat.json`, with an allowance per phase
    /// (`supervisor.stale_after_s` and the phase keys beside it).
    Heartbeat,
    /// The run's `step_heartbeat.json` (the worker's progress lines), with
    /// `supervisor.data_step_stale_after_s`.
    StepHeartbeat,
}

/// A local file (or folder of files) a step reads, named by the config key that
/// holds its path; its fingerprint is part of the step's inputs (`steps::inputs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalFile {
    /// Every `data.sources[]` entry given as a `path` (file or folder).
    SourcePaths,
    SftJsonl,
    DpoJsonl,
    /// `model.init_from`: a pretrained model's folder.
    InitFrom,
}

impl LocalFile {
    /// The config key holding the path.
    pub fn config_key(self) -> &'static str {
        match self {
            LocalFile::SourcePaths => "data.sources[].path",
            LocalFile::SftJsonl => "data.sft_jsonl",
            LocalFile::DpoJsonl => "data.dpo_jsonl",
            LocalFile::InitFrom => "model.init_from",
        }
    }
}

/// One step's row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepSpec {
    pub step: PipelineStep,
    /// The name in the config, on the worker's command line and in the status.
    pub name: &'static str,
    pub kind: StepKind,
    /// One line for the worker's `--help`.
    pub about: &'static str,
    /// The config keys (dotted paths; `<scale>` stands for the config's `scale`)
    /// whose values the step's outputs depend on: a change to any of them makes a
    /// finished step run again at the next `lavenderd start` (its done-marker records
    /// them). Keys that change only how a step reports or where it runs
    /// (`training.log_every`, `device`, `threads`, `training.keep_checkpoints`) are
    /// left out.
    pub config_keys: &'static [&'static str],
    /// The steps whose outputs (their manifests) this step reads.
    pub reads_outputs_of: &'static [PipelineStep],
    /// The local files it reads (for the steps with no upstream step standing for them).
    pub local_files: &'static [LocalFile],
    pub hang: HangWatch,
    /// The folder under the data root that holds its outputs and, last, its
    /// `manifest.json` (`None`: the train step, whose outputs are runs).
    pub output_dir: Option<&'static str>,
    /// The counts of its manifest the status shows under `data`, as (status key,
    /// manifest key). Where several steps give one key, the later step's wins.
    pub counts: &'static [(&'static str, &'static str)],
}

use PipelineStep as S;

/// The names of the steps from the first through `last`, in the pipeline's order
/// (tests run the data steps a later one needs).
pub fn names_through(last: PipelineStep) -> Vec<&'static str> {
    STEPS
        .iter()
        .take(last as usize + 1)
        .map(|s| s.name)
        .collect()
}

/// The status's `data` keys: every count a step's row names, each once, sorted.
pub fn data_count_keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = STEPS
        .iter()
        .flat_map(|s| s.counts.iter().map(|(key, _)| *key))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Every step, in the pipeline's order, each at the index of its [`PipelineStep`].
pub static STEPS: [StepSpec; 8] = [
    StepSpec {
        step: S::Downloads,
        name: "downloads",
        kind: StepKind::Data,
        about: "Gather the corpus into <data_root>/corpus/.",
        config_keys: &[
            "data.sources",
            "data.document_separator",
            "data.on_bad_record",
        ],
        reads_outputs_of: &[],
        local_files: &[LocalFile::SourcePaths],
        hang: HangWatch::StepHeartbeat,
        output_dir: Some(data_root::CORPUS),
        counts: &[
            ("documents", "documents"),
            ("skipped_records", "skipped_records"),
        ],
    },
    StepSpec {
        step: S::Dedup,
        name: "dedup",
        kind: StepKind::Data,
        about: "Remove duplicate documents.",
        config_keys: &["data.dedup", "data.document_separator"],
        reads_outputs_of: &[S::Downloads],
        local_files: &[],
        hang: HangWatch::StepHeartbeat,
        output_dir: Some(data_root::DEDUP),
        counts: &[("documents", "documents")],
    },
    StepSpec {
        step: S::Filter,
        name: "filter",
        kind: StepKind::Data,
        about: "Apply the quality rules.",
        config_keys: &["data.filter"],
        reads_outputs_of: &[S::Dedup],
        local_files: &[],
        hang: HangWatch::StepHeartbeat,
        output_dir: Some(data_root::FILTERED),
        counts: &[("documents", "documents")],
    },
    StepSpec {
        step: S::BuildShards,
        name: "build_shards",
        kind: StepKind::Data,
        about: "Pack documents into shards with a manifest.",
        config_keys: &["data.shards"],
        reads_outputs_of: &[S::Filter],
        local_files: &[],
        hang: HangWatch::StepHeartbeat,
        output_dir: Some(data_root::SHARDS),
        counts: &[
            ("shard_count", "shard_count"),
            ("documents", "documents"),
            ("shards_available", "shard_count"),
        ],
    },
    StepSpec {
        step: S::Stats,
        name: "stats",
        kind: StepKind::Data,
        about: "Count the documents, words and shard sizes of the chunk to train on.",
        // The chunk's shards are the scale's (`scales.<scale>.shards`); a chunk has
        // its own done-markers.
        config_keys: &["data.shards", "scale", "scales.<scale>.shards"],
        reads_outputs_of: &[S::BuildShards],
        local_files: &[],
        hang: HangWatch::StepHeartbeat,
        output_dir: Some("stats"),
        counts: &[
            ("stats_documents", "documents"),
            ("stats_words", "words"),
            ("stats_shards", "shards"),
            ("stats_shard_bytes", "shard_bytes"),
            ("stats_shard_bytes_min", "shard_bytes_min"),
            ("stats_shard_bytes_max", "shard_bytes_max"),
        ],
    },
    StepSpec {
        step: S::Precompute,
        name: "precompute",
        kind: StepKind::Data,
        about: "Train the tokenizer and encode shards, SFT and DPO sets into token arrays.",
        config_keys: &[
            "data.tokenizer",
            "data.sft_jsonl",
            "data.dpo_jsonl",
            "data.heldout_fraction",
            "model.init_from",
            "seed",
        ],
        reads_outputs_of: &[S::BuildShards, S::Filter],
        local_files: &[
            LocalFile::SftJsonl,
            LocalFile::DpoJsonl,
            LocalFile::InitFrom,
        ],
        hang: HangWatch::StepHeartbeat,
        output_dir: Some(data_root::TOKENS),
        counts: &[
            ("tokens", "tokens"),
            ("vocab_size", "vocab_size"),
            ("sft_samples", "sft_samples"),
            ("dpo_pairs", "dpo_pairs"),
            ("shards_used", "shards_used"),
            ("shards_available", "shards_available"),
        ],
    },
    StepSpec {
        step: S::Train,
        name: "train",
        kind: StepKind::Train,
        about: "Train pretrain → sft → dpo with checkpoints, heartbeat and events.",
        config_keys: &[
            "seed",
            "scale",
            "scales.<scale>",
            "model",
            "optimizer",
            "training.batch_size",
            "training.seq_len",
            "training.grad_accum",
            "training.stages",
        ],
        reads_outputs_of: &[S::Precompute],
        local_files: &[],
        hang: HangWatch::Heartbeat,
        output_dir: None,
        counts: &[],
    },
    StepSpec {
        step: S::MineHard,
        name: "mine_hard",
        kind: StepKind::Mine,
        about: "Score training windows and keep the hardest.",
        config_keys: &[
            "scale",
            "scales.<scale>.shards",
            "training.seq_len",
            "data.hard_examples",
        ],
        reads_outputs_of: &[S::Precompute],
        local_files: &[],
        hang: HangWatch::StepHeartbeat,
        output_dir: Some(data_root::HARD_EXAMPLES),
        counts: &[("hard_examples", "hard_examples")],
    },
];

impl PipelineStep {
    pub const ALL: [PipelineStep; 8] = [
        S::Downloads,
        S::Dedup,
        S::Filter,
        S::BuildShards,
        S::Stats,
        S::Precompute,
        S::Train,
        S::MineHard,
    ];

    /// This step's row of [`STEPS`].
    pub const fn spec(self) -> &'static StepSpec {
        &STEPS[self as usize]
    }

    /// Where a step named `name` stands in the pipeline's order, for display: a name
    /// that is not a pipeline step comes after all of them.
    pub fn display_rank(name: &str) -> usize {
        PipelineStep::ALL
            .iter()
            .position(|s| s.as_str() == name)
            .unwrap_or(PipelineStep::ALL.len())
    }

    /// See [`StepSpec::config_keys`].
    pub fn config_keys(self) -> &'static [&'static str] {
        self.spec().config_keys
    }

    /// The steps whose outputs (their manifests) this step reads.
    pub fn reads_outputs_of(self) -> &'static [PipelineStep] {
        self.spec().reads_outputs_of
    }

    pub fn kind(self) -> StepKind {
        self.spec().kind
    }

    pub const fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The step names, comma-separated, for error messages.
    pub fn names() -> String {
        let names: Vec<&str> = STEPS.iter().map(|s| s.name).collect();
        names.join(", ")
    }
}

impl fmt::Display for PipelineStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no pipeline step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a pipeline step; the steps are {steps}", steps = PipelineStep::names())]
pub struct NotAStep(pub String);

impl std::str::FromStr for PipelineStep {
    type Err = NotAStep;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        STEPS
            .iter()
            .find(|spec| spec.name == s)
            .map(|spec| spec.step)
            .ok_or_else(|| NotAStep(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_but_train_has_its_own_output_folder_and_counts_name_distinct_keys() {
        let mut dirs = Vec::new();
        for spec in &STEPS {
            assert_eq!(
                spec.output_dir.is_none(),
                spec.kind == StepKind::Train,
                "{}",
                spec.name
            );
            dirs.extend(spec.output_dir);
            let mut keys: Vec<_> = spec.counts.iter().map(|(k, _)| *k).collect();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(
                keys.len(),
                spec.counts.len(),
                "{} names a key twice",
                spec.name
            );
        }
        let before = dirs.len();
        dirs.sort_unstable();
        dirs.dedup();
        assert_eq!(dirs.len(), before, "two steps share an output folder");
        assert_eq!(names_through(PipelineStep::Dedup), ["downloads", "dedup"]);
        assert!(data_count_keys().contains(&"documents"));
    }

    #[test]
    fn each_row_is_at_its_steps_index_and_names_it_as_serde_does() {
        for (i, step) in PipelineStep::ALL.into_iter().enumerate() {
            assert_eq!(STEPS[i].step, step, "row {i}");
            assert_eq!(step as usize, i);
            let serde_name = serde_json::to_value(step).unwrap();
            assert_eq!(serde_name, step.as_str(), "row {i}");
            assert_eq!(step.as_str().parse::<PipelineStep>(), Ok(step));
        }
    }

    #[test]
    fn a_step_reads_only_outputs_of_steps_before_it() {
        for spec in &STEPS {
            for up in spec.reads_outputs_of {
                assert!(
                    up < &spec.step,
                    "{} reads {up}, which runs after it",
                    spec.name
                );
            }
        }
    }

    /// "How to add a pipeline step" (docs/ARCHITECTURE.md): the table and the default
    /// config (configs/default.yaml) name the same steps, in the same order, and every
    /// key a row names is a key of the default config.
    #[test]
    fn the_table_and_the_default_config_agree() {
        let config = crate::config::Config::default();
        assert_eq!(
            config.steps,
            PipelineStep::ALL,
            "configs/default.yaml's `steps:` and STEPS differ"
        );
        let tree = serde_json::to_value(&config).unwrap();
        let scale = tree["scale"].as_str().unwrap().to_string();
        for spec in &STEPS {
            let files = spec.local_files.iter().map(|f| f.config_key());
            for key in spec.config_keys.iter().copied().chain(files) {
                // A key into a list's items (`data.sources[].path`): the list.
                let key = key.split("[]").next().unwrap_or(key);
                let found = key
                    .split('.')
                    .map(|k| if k == "<scale>" { scale.as_str() } else { k })
                    .try_fold(&tree, |v, k| v.get(k));
                assert!(
                    found.is_some(),
                    "{}: `{key}` is no key of the default config",
                    spec.name
                );
            }
        }
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_steps_named() {
        let e = "trian".parse::<PipelineStep>().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "\"trian\" is not a pipeline step; the steps are {}",
                PipelineStep::names()
            )
        );
        assert!(PipelineStep::names().starts_with("downloads, dedup, filter, build_shards, "));
    }
}
