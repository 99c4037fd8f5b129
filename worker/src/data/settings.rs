//! What the data steps read from the resolved config: the `data` section, scale, chunk,
//! seed, and the data root.
//!
//! This reads the config file itself, layering file < `--scale`/`--chunk` < `--set` over
//! the defaults of configs/default.yaml. It belongs in core: once `lavender::config` lands,
//! `Settings::load` becomes a projection of `Config::load` and the rest stays as is.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cli::StepArgs;

/// The defaults of the keys the data steps read (mirrors configs/default.yaml).
const DEFAULTS: &str = r#"
scale: tiny
chunk: 1
seed: 1337
data_root: null
data_root_candidates: []
data:
  sources:
    - embedded: tinyshakespeare
  document_separator: "\n\n"
  dedup: {paragraphs: false, near_duplicates: false, near_threshold: 0.8}
  filter: {min_chars: 1, max_chars: 100000, max_nonprintable_ratio: 0.1, max_repeated_line_ratio: 0.5}
  shards: {shard_bytes: 65536, validation_fraction: 0.05}
  tokenizer: {vocab_size: 2048, min_frequency: 2}
  sft_jsonl: null
  dpo_jsonl: null
  heldout_fraction: 0.05
"#;

/// A `data.sources` item: `{embedded: NAME}`, `{path: PATH}` or `{url: URL, sha256: HEX}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawSource", into = "RawSource")]
pub enum Source {
    Embedded { embedded: String },
    Url { url: String, sha256: String },
    Path { path: PathBuf },
}

/// The YAML shape of a source, so a wrong one gets an error that shows the right shapes.
#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    embedded: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<Value>,
}

impl TryFrom<RawSource> for Source {
    type Error = String;

    fn try_from(r: RawSource) -> Result<Source, String> {
        const SHAPES: &str = "{embedded: tinyshakespeare}, {path: PATH} or {url: URL, sha256: HEX}";
        match r {
            RawSource {
                embedded: Some(embedded),
                path: None,
                url: None,
                sha256: None,
            } => Ok(Source::Embedded { embedded }),
            RawSource {
                embedded: None,
                path: Some(path),
                url: None,
                sha256: None,
            } => Ok(Source::Path { path }),
            RawSource {
                embedded: None,
                path: None,
                url: Some(url),
                sha256: Some(sha),
            } => match sha {
                Value::String(sha256) => Ok(Source::Url { url, sha256 }),
                other => Err(format!(
                    "the sha256 of {url} must be a quoted string of 64 hex digits, not {other}"
                )),
            },
            RawSource {
                url: Some(url),
                sha256: None,
                ..
            } => Err(format!(
                "the url source {url} needs `sha256: HEX` (the file's SHA-256) so the download can be verified"
            )),
            _ => Err(format!("a source is exactly one of {SHAPES}")),
        }
    }
}

impl From<Source> for RawSource {
    fn from(s: Source) -> RawSource {
        match s {
            Source::Embedded { embedded } => RawSource {
                embedded: Some(embedded),
                ..Default::default()
            },
            Source::Path { path } => RawSource {
                path: Some(path),
                ..Default::default()
            },
            Source::Url { url, sha256 } => RawSource {
                url: Some(url),
                sha256: Some(Value::String(sha256)),
                ..Default::default()
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DedupSettings {
    pub paragraphs: bool,
    pub near_duplicates: bool,
    pub near_threshold: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilterSettings {
    pub min_chars: u64,
    pub max_chars: u64,
    pub max_nonprintable_ratio: f64,
    pub max_repeated_line_ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardSettings {
    pub shard_bytes: u64,
    pub validation_fraction: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizerSettings {
    pub vocab_size: u32,
    pub min_frequency: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSettings {
    pub sources: Vec<Source>,
    pub document_separator: String,
    pub dedup: DedupSettings,
    pub filter: FilterSettings,
    pub shards: ShardSettings,
    pub tokenizer: TokenizerSettings,
    pub sft_jsonl: Option<PathBuf>,
    pub dpo_jsonl: Option<PathBuf>,
    pub heldout_fraction: f64,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub scale: String,
    /// Shards a run of this scale trains on (the scale preset's `shards`).
    pub scale_shards: u32,
    pub chunk: u8,
    pub seed: u64,
    pub data: DataSettings,
    pub data_root: PathBuf,
    pub run_dir: Option<PathBuf>,
    pub force: bool,
    /// Directory relative paths in the config file are resolved against.
    pub config_dir: PathBuf,
}

/// The scale presets' shard counts (tiny 4, small 21, medium 43, large 81).
pub fn scale_shards(scale: &str) -> Option<u32> {
    match scale {
        "tiny" => Some(4),
        "small" => Some(21),
        "medium" => Some(43),
        "large" => Some(81),
        _ => None,
    }
}

impl Settings {
    pub fn load(args: &StepArgs) -> Result<Settings> {
        let mut tree: Value = serde_saphyr::from_str(DEFAULTS).expect("built-in defaults parse");
        let cwd = std::env::current_dir().context("could not read the current directory")?;
        let mut config_dir = cwd.clone();
        if let Some(file) = &args.config {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("could not read config file {}", file.display()))?;
            let layer: Value = serde_saphyr::from_str(&text)
                .with_context(|| format!("config file {} is not valid YAML", file.display()))?;
            merge(&mut tree, layer);
            if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
                config_dir = dir.to_path_buf();
            }
        }
        if let Some(scale) = &args.scale {
            tree["scale"] = Value::String(scale.clone());
        }
        if let Some(chunk) = args.chunk {
            tree["chunk"] = Value::from(chunk);
        }
        for o in &args.overrides {
            let (key, value) = o.split_once('=').with_context(|| {
                format!("--set {o:?}: expected KEY=VALUE, e.g. data.tokenizer.vocab_size=512")
            })?;
            let value: Value =
                serde_saphyr::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
            set_path(&mut tree, key, value);
        }

        let scale = tree["scale"].as_str().unwrap_or_default().to_string();
        let scale_shards = scale_shards(&scale).with_context(|| {
            format!("scale {scale:?} is not a scale preset: use tiny, small, medium or large")
        })?;
        let chunk = tree["chunk"].as_u64().unwrap_or(0);
        ensure!(
            (1..=crate::tokens::CHUNKS as u64).contains(&chunk),
            "chunk {} is out of range: use 1..={}",
            tree["chunk"],
            crate::tokens::CHUNKS
        );
        let seed = tree["seed"]
            .as_u64()
            .with_context(|| format!("seed {} is not a non-negative integer", tree["seed"]))?;
        let data: DataSettings = serde_json::from_value(tree["data"].clone())
            .context("the config's `data` section is malformed")?;
        validate(&data)?;

        let data_root = resolve_data_root(args.data_root.as_deref(), &tree, &cwd);
        Ok(Settings {
            scale,
            scale_shards,
            chunk: chunk as u8,
            seed,
            data,
            data_root,
            run_dir: args.run_dir.clone(),
            force: args.force,
            config_dir,
        })
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

fn validate(d: &DataSettings) -> Result<()> {
    let fraction = |name: &str, v: f64| -> Result<()> {
        ensure!(
            (0.0..1.0).contains(&v),
            "data.{name} = {v} is out of range: use a fraction in [0, 1)"
        );
        Ok(())
    };
    fraction("shards.validation_fraction", d.shards.validation_fraction)?;
    fraction("heldout_fraction", d.heldout_fraction)?;
    ensure!(
        d.shards.shard_bytes > 0,
        "data.shards.shard_bytes must be positive"
    );
    ensure!(
        d.tokenizer.vocab_size >= 260,
        "data.tokenizer.vocab_size = {} is too small: byte-level BPE needs at least 256 bytes + special tokens (use ≥ 260)",
        d.tokenizer.vocab_size
    );
    if d.filter.min_chars > d.filter.max_chars {
        bail!(
            "data.filter.min_chars ({}) is larger than data.filter.max_chars ({})",
            d.filter.min_chars,
            d.filter.max_chars
        );
    }
    Ok(())
}

/// `--data-root` / LAVENDER_DATA_ROOT > config `data_root` > first existing candidate > ./data.
fn resolve_data_root(cli: Option<&Path>, tree: &Value, cwd: &Path) -> PathBuf {
    if let Some(p) = cli {
        return p.to_path_buf();
    }
    if let Some(p) = tree["data_root"].as_str() {
        return PathBuf::from(p);
    }
    if let Some(list) = tree["data_root_candidates"].as_array() {
        for c in list.iter().filter_map(Value::as_str) {
            if Path::new(c).is_dir() {
                return PathBuf::from(c);
            }
        }
    }
    cwd.join("data")
}

fn merge(base: &mut Value, layer: Value) {
    match (base, layer) {
        (Value::Object(b), Value::Object(l)) => {
            for (k, v) in l {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, l) => *b = l,
    }
}

fn set_path(tree: &mut Value, key: &str, value: Value) {
    let mut at = tree;
    for part in key.split('.') {
        if !at.is_object() {
            *at = Value::Object(Default::default());
        }
        at = at
            .as_object_mut()
            .expect("just made an object")
            .entry(part)
            .or_insert(Value::Null);
    }
    *at = value;
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
            chunk: None,
            force: false,
            overrides: sets.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn defaults_file_and_overrides_layer_in_order() {
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
        assert_eq!(s.data.tokenizer.vocab_size, 512);
        assert_eq!(s.data.tokenizer.min_frequency, 2);
        assert!(s.data.dedup.paragraphs);
        assert_eq!(
            s.data.sources,
            vec![Source::Path {
                path: "corpus".into()
            }]
        );
        assert_eq!(
            s.config_path(Path::new("corpus")),
            tmp.path().join("corpus")
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = Settings::load(&args(None, &["data.heldout_fraction=1.5"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("data.heldout_fraction"), "{err}");
        let err = Settings::load(&args(None, &["scale=huge"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("huge") && err.contains("tiny"), "{err}");
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "data:\n  sources: [{url: http://x/y}]\n").unwrap();
        let err = format!(
            "{:#}",
            Settings::load(&args(Some(file.path().into()), &[])).unwrap_err()
        );
        assert!(
            err.contains("http://x/y") && err.contains("sha256"),
            "{err}"
        );
        std::fs::write(file.path(), "data:\n  sources: [{file: a}]\n").unwrap();
        let err = format!(
            "{:#}",
            Settings::load(&args(Some(file.path().into()), &[])).unwrap_err()
        );
        assert!(err.contains("file"), "{err}");
    }
}
