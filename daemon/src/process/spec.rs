//! A launch as data: which step, with which config, run directory and checkpoint.
//! The run's settings (its scale among them) travel in the config file alone.
//! Each backend renders it in its own terms: the local one into the worker's argv,
//! the Slurm one into a batch script (which also resumes a requeued train step from
//! its run directory). Nothing parses an argv back.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lavender::config::{LoggingConfig, PipelineStep};

#[derive(Debug, Clone, PartialEq)]
pub struct SpawnSpec {
    /// `worker.command`: the program and its leading arguments.
    pub command: Vec<String>,
    pub step: PipelineStep,
    /// The resolved config the worker reads (`--config`).
    pub config: PathBuf,
    pub data_root: PathBuf,
    pub run_dir: Option<PathBuf>,
    pub chunk: u32,
    /// The checkpoint this start resumes from (the train step only).
    pub resume: Option<PathBuf>,
    /// `worker.env`: extra environment for the worker.
    pub env: BTreeMap<String, String>,
    /// Where the worker's stdout and stderr are appended.
    pub log_file: PathBuf,
    /// How that log rotates (`logging`; a Slurm job's output file, written by Slurm,
    /// does not).
    pub log_rotation: LoggingConfig,
    /// `training.log_every`: the daemon's progress lines in that log (`logs::story`).
    pub progress_every: u64,
}

impl SpawnSpec {
    /// The worker protocol without the resume:
    /// `command… <step> --config C --data-root D [--run-dir R] --chunk N`.
    pub fn argv_without_resume(&self) -> Vec<String> {
        let arg = |p: &PathBuf| p.display().to_string();
        let mut argv = self.command.clone();
        argv.push(self.step.to_string());
        argv.extend([
            "--config".into(),
            arg(&self.config),
            "--data-root".into(),
            arg(&self.data_root),
        ]);
        if let Some(run_dir) = &self.run_dir {
            argv.extend(["--run-dir".into(), arg(run_dir)]);
        }
        argv.extend(["--chunk".into(), self.chunk.to_string()]);
        argv
    }

    /// `--resume P`, or nothing.
    pub fn resume_args(&self) -> Vec<String> {
        self.resume
            .iter()
            .flat_map(|p| ["--resume".to_string(), p.display().to_string()])
            .collect()
    }

    /// The whole argv of a start on this machine.
    pub fn argv(&self) -> Vec<String> {
        let mut argv = self.argv_without_resume();
        argv.extend(self.resume_args());
        argv
    }

    /// Whether the step trains: it runs as many tasks under Slurm, and a requeued job
    /// resumes from its run directory.
    pub fn trains(&self) -> bool {
        self.step == PipelineStep::Train
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A train step of `worker` into `/runs/r 1`, resuming from `/ck/a`.
    pub(crate) fn train_spec(worker: &str) -> SpawnSpec {
        SpawnSpec {
            command: vec![worker.to_string()],
            step: PipelineStep::Train,
            config: PathBuf::from("/state/pipeline-config.yaml"),
            data_root: PathBuf::from("/data"),
            run_dir: Some(PathBuf::from("/runs/r 1")),
            chunk: 2,
            resume: Some(PathBuf::from("/ck/a")),
            env: BTreeMap::from([("A".to_string(), "x y".to_string())]),
            log_file: PathBuf::from("/logs/p.log"),
            log_rotation: LoggingConfig::default(),
            progress_every: 10,
        }
    }

    #[test]
    fn argv_follows_the_worker_protocol() {
        let spec = train_spec("worker");
        assert_eq!(
            spec.argv(),
            [
                "worker",
                "train",
                "--config",
                "/state/pipeline-config.yaml",
                "--data-root",
                "/data",
                "--run-dir",
                "/runs/r 1",
                "--chunk",
                "2",
                "--resume",
                "/ck/a",
            ]
        );
        let fresh = SpawnSpec {
            run_dir: None,
            resume: None,
            step: PipelineStep::Dedup,
            ..spec
        };
        assert_eq!(fresh.argv(), fresh.argv_without_resume());
        assert!(!fresh.argv().iter().any(|a| a == "--run-dir"));
        assert!(!fresh.trains());
    }
}
