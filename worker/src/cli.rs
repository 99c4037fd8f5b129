//! Arguments every worker step takes; the daemon passes them (see docs/ARCHITECTURE.md,
//! "Worker protocol").

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct StepArgs {
    /// The pipeline config (YAML). Defaults to the embedded configs/default.yaml.
    #[arg(long, env = "LAVENDER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The data root (corpus/, shards/, tokens/, checkpoints/ …).
    #[arg(long, env = "LAVENDER_DATA_ROOT")]
    pub data_root: Option<PathBuf>,
    /// The run directory that receives events.jsonl and heartbeat.json.
    #[arg(long, env = "LAVENDER_RUN_DIR")]
    pub run_dir: Option<PathBuf>,
    /// Scale preset: tiny|small|medium|large (overrides the config).
    #[arg(long)]
    pub scale: Option<String>,
    /// Training chunk 1..=4 (overrides the config).
    #[arg(long)]
    pub chunk: Option<u8>,
    /// Rerun the step even when its manifest says its inputs have not changed.
    #[arg(long)]
    pub force: bool,
    /// Config overrides, `key.path=value`, applied last.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
}
