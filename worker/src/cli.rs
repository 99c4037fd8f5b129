//! Arguments every worker step takes; the daemon passes them (see docs/ARCHITECTURE.md,
//! "Worker protocol").

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use lavender::config::{Config, LoadOptions};

/// How many processes torchrun (and other launchers) started together.
const WORLD_SIZE: &str = "WORLD_SIZE";

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
    /// Rerun the step even when its manifest says its inputs have not changed
    /// (`lavenderd start --force` sets LAVENDER_FORCE=true for the steps it runs again).
    #[arg(long, env = "LAVENDER_FORCE")]
    pub force: bool,
    /// Config overrides, `key.path=value`, applied last.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
}

/// The layered config a step runs with, and where its paths resolve.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// `--data-root` > `LAVENDER_DATA_ROOT` > the config's `data_root` / candidates >
    /// a `data-root/` folder here or above > the per-user data folder, as lavenderd finds it.
    pub data_root: PathBuf,
    /// Relative paths in the config (sources, JSONL files) are taken from here: the
    /// config file's directory, or the working directory without a file.
    pub config_dir: PathBuf,
}

impl StepArgs {
    /// Defaults < `--config` file < `LAVENDER_*` environment < `--scale`/`--chunk` <
    /// `--set`, validated; every step (data, train, mine_hard, generate) loads through
    /// here, so they all resolve the same config the same way.
    pub fn load(&self) -> Result<Loaded> {
        let mut opts = LoadOptions::from_process_env();
        opts.file = self.config.clone();
        if let Some(scale) = &self.scale {
            opts.overrides.push(("scale".into(), scale.clone()));
        }
        if let Some(chunk) = self.chunk {
            opts.overrides.push(("chunk".into(), chunk.to_string()));
        }
        for kv in &self.overrides {
            let (key, value) = kv.split_once('=').with_context(|| {
                format!("--set {kv:?} is not KEY=VALUE; write it like --set training.batch_size=8")
            })?;
            opts.overrides
                .push((key.trim().to_string(), value.to_string()));
        }
        let config = Config::load(&opts)?;
        // One process on one device, whatever launched it.
        config.check_one_process(std::env::var(WORLD_SIZE).ok().as_deref())?;
        let cwd = std::env::current_dir().context("could not read the current directory")?;
        let data_root = config
            .data_root(
                self.data_root.as_deref(),
                &lavender::data_root::DataRootEnv::from_process(),
                &cwd,
            )
            .path;
        let config_dir = self
            .config
            .as_ref()
            .and_then(|f| f.parent())
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| cwd.clone(), |d| cwd.join(d));
        Ok(Loaded {
            config,
            data_root,
            config_dir,
        })
    }
}
