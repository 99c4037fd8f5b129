//! What the data steps read from the resolved config (`lavender::config`): the `data`
//! section, scale, chunk and seed, plus the data root and the step's flags.

use std::path::{Path, PathBuf};

use anyhow::Result;
use lavender::config::{ConfigOrigins, DataConfig};

use crate::cli::StepArgs;

#[derive(Debug, Clone)]
pub struct Settings {
    pub scale: String,
    /// Shards a run of this scale trains on (the scale preset's `shards`).
    pub scale_shards: u32,
    pub chunk: u8,
    pub seed: u64,
    pub data: DataConfig,
    pub data_root: PathBuf,
    pub run_dir: Option<PathBuf>,
    pub force: bool,
    /// `model.init_from`, taken from the config file's directory: precompute uses its
    /// tokenizer instead of training one.
    pub init_from: Option<PathBuf>,
    /// Relative paths in `data` (sources, JSONL files) are taken from here: the config
    /// file's directory, or the working directory without a file.
    pub config_dir: PathBuf,
    /// Where each value was set, named by errors about them ([`Settings::config_error`]).
    pub origins: ConfigOrigins,
}

impl Settings {
    /// The layered config of `args` (see [`StepArgs::load`]).
    pub fn load(args: &StepArgs) -> Result<Settings> {
        let loaded = args.load()?;
        let config = loaded.config;
        Ok(Settings {
            scale: config.scale.to_string(),
            scale_shards: config.preset().shards,
            // The config validates 1..=4.
            chunk: u8::try_from(config.chunk).unwrap_or(1),
            seed: config.seed,
            init_from: config
                .model
                .init_from
                .as_ref()
                .map(|p| loaded.config_dir.join(p)),
            data: config.data,
            data_root: loaded.data_root,
            run_dir: args.run_dir.clone(),
            force: args.force,
            config_dir: loaded.config_dir,
            origins: loaded.origins,
        })
    }

    /// An error about the value of `key` (see `cli::config_error`).
    pub fn config_error(&self, key: &str, message: impl Into<String>) -> anyhow::Error {
        crate::cli::config_error(&self.origins, key, message)
    }

    /// A path from the config, relative ones taken from the config file's directory.
    pub fn config_path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.config_dir.join(p)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(config: Option<PathBuf>, sets: &[&str]) -> StepArgs {
        StepArgs {
            config,
            data_root: Some("/tmp/x".into()),
            run_dir: None,
            scale: None,
            chunk: Some(3),
            force: false,
            overrides: sets.iter().map(|s| s.to_string()).collect(),
            config_origins: None,
        }
    }

    #[test]
    fn file_flags_and_overrides_layer_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("c.yaml");
        std::fs::write(
            &file,
            "scale: small\ndata:\n  sources: [{path: corpus}]\n  tokenizer: {vocab_size: 512}\n",
        )
        .unwrap();
        let s = Settings::load(&args(Some(file), &["data.dedup.paragraphs=true"])).unwrap();
        assert_eq!(s.scale, "small");
        assert_eq!(s.scale_shards, 21);
        assert_eq!(s.chunk, 3);
        assert_eq!(s.data.tokenizer.vocab_size, 512);
        assert!(s.data.dedup.paragraphs);
        assert_eq!(s.data_root, PathBuf::from("/tmp/x"));
        assert_eq!(
            s.config_path(Path::new("corpus")),
            tmp.path().join("corpus")
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = format!(
            "{:#}",
            Settings::load(&args(None, &["data.heldout_fraction=1.5"])).unwrap_err()
        );
        assert!(err.contains("data.heldout_fraction"), "{err}");
        let err = format!(
            "{:#}",
            Settings::load(&args(None, &["nonsense"])).unwrap_err()
        );
        assert!(err.contains("KEY=VALUE"), "{err}");
    }
}
