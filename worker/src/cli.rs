//! Arguments every worker step takes; the daemon passes them (see docs/ARCHITECTURE.md,
//! "Worker protocol").

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use lavender::config::{Config, ConfigError, ConfigOrigins, LoadOptions};

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
    /// Where each value of `--config` was set, as lavenderd writes it beside its copy
    /// of the operator's config: errors about a value then name the operator's file
    /// and line (or the variable or flag) that set it, not the copy.
    #[arg(long, env = lavender::config::ORIGINS_VAR, value_name = "PATH")]
    pub config_origins: Option<PathBuf>,
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
    /// Where each value was set (see [`StepArgs::config_origins`]).
    pub origins: ConfigOrigins,
}

/// An error about the value of `key`, which breaks a rule the worker knows:
/// `message` says what is wrong and what to do; the error names where the value was
/// set (`origins`: [`Loaded::origins`]). A `config` failure (`failure::failure_of`).
pub fn config_error(
    origins: &ConfigOrigins,
    key: &str,
    message: impl Into<String>,
) -> anyhow::Error {
    // Tagged: a step that tags what it reads as data still fails as `config` here.
    crate::failure::tag(
        anyhow::Error::new(origins.relocate(ConfigError::invalid(key, message))),
        lavender::failure::FailureKind::Config,
    )
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
        let given = self.given_origins();
        // An error in the copy lavenderd wrote names where the operator set the value.
        let relocate = |e: ConfigError| match &given {
            Some(o) => o.relocate(e),
            None => e,
        };
        let (config, origins) = Config::load_located(&opts).map_err(relocate)?;
        // One process on one device, whatever launched it.
        config
            .check_one_process(std::env::var(WORLD_SIZE).ok().as_deref())
            .map_err(|e| given.as_ref().unwrap_or(&origins).relocate(e))?;
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
            origins: given.unwrap_or(origins),
        })
    }

    /// The origins `--config-origins` names; a file that cannot be read is said on
    /// stderr and the config's own origins are used (the copy's lines then).
    fn given_origins(&self) -> Option<ConfigOrigins> {
        let path = self.config_origins.as_ref()?;
        let read = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| ConfigOrigins::from_json(&text).map_err(|e| e.to_string()));
        match read {
            Ok(origins) => Some(origins),
            Err(e) => {
                eprintln!(
                    "warning: --config-origins {}: {e}; errors about the config name {} instead",
                    path.display(),
                    self.config
                        .as_ref()
                        .map_or("the built-in defaults".into(), |c| c.display().to_string())
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use lavender::config::Origin;
    use lavender::failure::FailureKind;

    use super::*;
    use crate::failure::{KindExt, failure_of};

    fn args(config: PathBuf, origins: Option<PathBuf>) -> StepArgs {
        StepArgs {
            config: Some(config),
            data_root: Some("/tmp/x".into()),
            run_dir: None,
            scale: None,
            chunk: None,
            force: false,
            overrides: Vec::new(),
            config_origins: origins,
        }
    }

    /// The daemon's copy of a config, with where each value was set beside it: an
    /// error about a value of the copy names that place, never the copy.
    #[test]
    fn an_error_in_the_daemons_copy_names_where_the_operator_set_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lavender.yaml");
        std::fs::write(&file, "seed: 3\ntraining:\n  seq_len: 32\n").unwrap();
        let (_, mut origins) = Config::load_located(&LoadOptions {
            file: Some(file.clone()),
            ..LoadOptions::default()
        })
        .unwrap();
        origins.set("chunk", Origin::Flag("lavenderd start --chunk 9".into()));
        let origins_file = dir.path().join("pipeline-config.origins.json");
        std::fs::write(&origins_file, origins.to_json()).unwrap();
        let copy = dir.path().join("pipeline-config.yaml");
        std::fs::write(&copy, "seed: 3\nchunk: 9\ntraining:\n  seq_len: 32\n").unwrap();

        let err = args(copy.clone(), Some(origins_file.clone()))
            .load()
            .unwrap_err();
        let said = format!("{err:#}");
        assert!(
            said.starts_with("`lavenderd start --chunk 9`: chunk: 9 is out of range"),
            "{said}"
        );
        assert_eq!(failure_of(&err).kind, FailureKind::Config);

        // A value the worker judges itself: the operator's line, a config failure
        // even where the step tags what it reads as data.
        std::fs::write(&copy, "seed: 3\ntraining:\n  seq_len: 32\n").unwrap();
        let loaded = args(copy.clone(), Some(origins_file)).load().unwrap();
        let err = Err::<(), _>(config_error(
            &loaded.origins,
            "training.seq_len",
            "too long for this model",
        ))
        .kind(FailureKind::Data)
        .unwrap_err();
        let f = failure_of(&err);
        assert_eq!(f.kind, FailureKind::Config);
        assert!(
            f.message.starts_with(&format!("{}:3:", file.display()))
                && f.message
                    .ends_with(": training.seq_len: too long for this model"),
            "{}",
            f.message
        );

        // No origins file to read: the copy's own lines, said on stderr.
        let missing = dir.path().join("gone.json");
        let loaded = args(copy.clone(), Some(missing)).load().unwrap();
        let at = loaded.origins.of("training.seq_len").unwrap().to_string();
        assert!(at.starts_with(&format!("{}:3:", copy.display())), "{at}");
    }
}
