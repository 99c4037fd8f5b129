//! The options every command shares (`--config`, `--data-root`, `--state-dir`) and
//! what they resolve to: the layered config and the directory layout.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lavender::config::{Config, LoadOptions};
use lavender::data_root::{DataRootEnv, Resolved};

use lavender::layout::Layout;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Pipeline config (YAML) layered over the built-in defaults.
    #[arg(long, global = true, env = "LAVENDER_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Data root (default: LAVENDER_DATA_ROOT, the config's data_root, then its
    /// data_root_candidates, a data-root/ folder here or above, the per-user data folder).
    #[arg(long, global = true, value_name = "PATH")]
    pub data_root: Option<PathBuf>,
    /// The daemon's state directory (default: <data_root>/state).
    #[arg(long, global = true, value_name = "PATH")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub config: Config,
    pub config_file: Option<PathBuf>,
    pub layout: Layout,
    /// The data root and how it was chosen, which every command that reads it says first.
    pub data_root: Resolved,
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Settings {
    pub fn load(args: &GlobalArgs) -> Result<Settings> {
        let mut opts = LoadOptions::from_process_env();
        let config_file = args.config.as_deref().map(absolute);
        opts.file = config_file.clone();
        let config = Config::load(&opts).map_err(|e| anyhow::anyhow!("{e}"))?;
        let cwd = std::env::current_dir().context("read the current directory")?;
        let mut data_root = config.data_root(
            args.data_root.as_deref(),
            &DataRootEnv::from_process(),
            &cwd,
        );
        data_root.path = absolute(&data_root.path);
        let layout = Layout::new(
            data_root.path.clone(),
            args.state_dir.as_deref().map(absolute),
        );
        if let Some(key) = &config.replicate.signing_key_file {
            let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| absolute(p));
            if real(key).starts_with(real(&data_root.path)) {
                anyhow::bail!(
                    "replicate.signing_key_file {} is inside the data root {}: a key kept beside the checkpoints is lost with the disk it is there for, and goes wherever the data root is copied; keep it elsewhere (e.g. /etc/lavender/signing.key, readable by the daemon's user only)",
                    key.display(),
                    data_root.path.display()
                );
            }
        }
        Ok(Settings {
            config,
            config_file,
            layout,
            data_root,
        })
    }

    /// The same options as absolute-path arguments, for a daemon started in the background.
    pub fn to_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(c) = &self.config_file {
            out.extend(["--config".to_string(), c.display().to_string()]);
        }
        out.extend([
            "--data-root".to_string(),
            self.layout.data_root.display().to_string(),
            "--state-dir".to_string(),
            self.layout.state_dir.display().to_string(),
        ]);
        out
    }
}
