//! Relative paths in the config, taken once, where the config is loaded: a value from a
//! config file against that file's folder (as Cargo and docker compose do), a value
//! from the environment or a command-line override against the working directory. The
//! merged tree keeps each value's origin ([`Origin`]), so each path is rebased against
//! the layer that set it. Values of the built-in defaults are left as they are.
//!
//! The keys that name files ([`PATH_KEYS`]):
//! - `data_root`, `data.sources[].path` (a file, a folder or a glob), `data.sft_jsonl`,
//!   `data.dpo_jsonl`, `model.init_from`, `notify.bark.env_file`,
//!   `replicate.credentials_file`, `replicate.signing_key_file`,
//!   `tracking.tensorboard.dir`;
//! - `worker.command`: its program when it holds a `/` (a bare name such as `python`
//!   or `lavender-worker` is looked up on `PATH` when the worker starts, never
//!   rebased), and each later argument written as a path (not starting with `-`, and
//!   holding a `/` or a file extension) that names a file or folder existing relative
//!   to the base at load time (`[python, train.py]` with `train.py` beside the config
//!   file). Other arguments (flags, bare words such as `data`) are passed as written.
//!
//! After this, every such value in the loaded config is absolute when a working
//! directory was given ([`super::LoadOptions::cwd`]).

use std::path::{Component, Path, PathBuf};

use super::error::Origin;
use super::source::DataSource;
use super::tree::{Node, Value};
use super::{Config, DEFAULT_ORIGIN};

/// The keys whose values are paths (`[]` = every item of a list, `*` = every key of
/// a mapping), for the docs and for `config check`.
pub const PATH_KEYS: &[&str] = &[
    "data_root",
    "data.sources[].path",
    "data.sft_jsonl",
    "data.dpo_jsonl",
    "model.init_from",
    "notify.bark.env_file",
    "replicate.credentials_file",
    "replicate.signing_key_file",
    "tracking.tensorboard.dir",
    "worker.command",
];

/// Rebases every relative path of `root` against the layer that set it.
pub(crate) fn rebase(root: &mut Node, cwd: Option<&Path>) {
    for key in [
        &["data_root"][..],
        &["data", "sft_jsonl"],
        &["data", "dpo_jsonl"],
        &["model", "init_from"],
        &["notify", "bark", "env_file"],
        &["replicate", "credentials_file"],
        &["replicate", "signing_key_file"],
        &["tracking", "tensorboard", "dir"],
    ] {
        if let Some(node) = get_mut(root, key) {
            rebase_value(node, cwd);
        }
    }
    if let Some(Node {
        value: Value::Seq(sources),
        ..
    }) = get_mut(root, &["data", "sources"])
    {
        for source in sources {
            if let Some(path) = get_mut(source, &["path"]) {
                rebase_value(path, cwd);
            }
        }
    }
    if let Some(Node {
        value: Value::Seq(argv),
        ..
    }) = get_mut(root, &["worker", "command"])
    {
        for (i, arg) in argv.iter_mut().enumerate() {
            let Some((text, base)) = relative_text(arg, cwd) else {
                continue;
            };
            let names_file = if i == 0 {
                text.contains('/')
            } else {
                looks_like_a_path(&text) && base.join(&text).exists()
            };
            if names_file {
                arg.value = Value::Str(join(&base, &text).display().to_string());
            }
        }
    }
}

/// An argument written as a path: not a flag, and with a `/` or a file extension
/// (`train.py`, `conf/run.yaml`). A bare word (`data`, `train`) is an argument's value
/// even when a folder of that name happens to be there.
fn looks_like_a_path(text: &str) -> bool {
    !text.starts_with('-') && (text.contains('/') || text.chars().skip(1).any(|c| c == '.'))
}

fn get_mut<'a>(mut node: &'a mut Node, keys: &[&str]) -> Option<&'a mut Node> {
    for key in keys {
        let Value::Map(entries) = &mut node.value else {
            return None;
        };
        node = &mut entries.iter_mut().find(|e| e.key == *key)?.value;
    }
    Some(node)
}

fn rebase_value(node: &mut Node, cwd: Option<&Path>) {
    if let Some((text, base)) = relative_text(node, cwd) {
        node.value = Value::Str(join(&base, &text).display().to_string());
    }
}

/// A relative path's text and the folder it is taken from, or `None` for a value that
/// is not a relative path or comes from the built-in defaults.
fn relative_text(node: &Node, cwd: Option<&Path>) -> Option<(String, PathBuf)> {
    let Value::Str(text) = &node.value else {
        return None;
    };
    if text.is_empty() || Path::new(text).is_absolute() {
        return None;
    }
    Some((text.clone(), base(&node.origin, cwd)?))
}

/// The folder a value from `origin` is taken from.
fn base(origin: &Origin, cwd: Option<&Path>) -> Option<PathBuf> {
    match origin {
        Origin::File { name, .. } if &**name == DEFAULT_ORIGIN => None,
        Origin::File { name, .. } => {
            let dir = Path::new(&**name).parent().unwrap_or(Path::new(""));
            let dir = match cwd {
                Some(cwd) => cwd.join(dir),
                None => dir.to_path_buf(),
            };
            // The file was just read, so its folder exists: its canonical name has no
            // `..` (`--config ../project/lavender.yaml`) and names the same folder.
            Some(std::fs::canonicalize(&dir).unwrap_or(dir))
        }
        Origin::Env(_) | Origin::Override(_) | Origin::Flag(_) => Some(cwd?.to_path_buf()),
    }
}

/// `base/text` without `.` components (`./corpus` reads `/project/corpus`). `..` is
/// kept: lexically removing it would be wrong across a symbolic link.
fn join(base: &Path, text: &str) -> PathBuf {
    base.join(text)
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// A path the config names that is not on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPath {
    /// The key path (`data.sources[0].path`, `worker.command[0]`).
    pub key: String,
    pub path: PathBuf,
}

/// The files the config names that do not exist: local sources (for a glob, the folder
/// before its first pattern), `data.sft_jsonl`, `data.dpo_jsonl`, `model.init_from`,
/// `notify.bark.env_file`, `replicate.credentials_file`, `replicate.signing_key_file`, and `worker.command`'s program when it is a path (one with
/// a `/`; a bare name is for the caller to look up on `PATH`). Relative paths are taken
/// against the working directory of the process.
pub fn missing_paths(config: &Config) -> Vec<MissingPath> {
    let mut named: Vec<(String, PathBuf)> = Vec::new();
    for (i, source) in config.data.sources.iter().enumerate() {
        if let DataSource::Path(p) = source {
            named.push((format!("data.sources[{i}].path"), glob_base(&p.path)));
        }
    }
    let optional = [
        ("data.sft_jsonl", &config.data.sft_jsonl),
        ("data.dpo_jsonl", &config.data.dpo_jsonl),
        ("model.init_from", &config.model.init_from),
        ("notify.bark.env_file", &config.notify.bark.env_file),
        (
            "replicate.credentials_file",
            &config.replicate.credentials_file,
        ),
        (
            "replicate.signing_key_file",
            &config.replicate.signing_key_file,
        ),
    ];
    for (key, value) in optional {
        if let Some(path) = value {
            named.push((key.to_string(), path.clone()));
        }
    }
    if let Some(program) = config.worker.command.first().filter(|p| p.contains('/')) {
        named.push(("worker.command[0]".into(), PathBuf::from(program)));
    }
    named
        .into_iter()
        .filter(|(_, path)| !path.exists())
        .map(|(key, path)| MissingPath { key, path })
        .collect()
}

/// The part of a source path before its first glob pattern (`dumps/*.jsonl` →
/// `dumps`), which must exist for the pattern to match anything.
fn glob_base(path: &Path) -> PathBuf {
    let mut base = PathBuf::new();
    for c in path.components() {
        if c.as_os_str().to_string_lossy().contains(['*', '?', '[']) {
            break;
        }
        base.push(c);
    }
    base
}

#[cfg(test)]
mod tests {
    use super::super::{Config, LoadOptions};
    use super::*;

    fn load(file: &Path, cwd: &Path, env: &[(&str, &str)], sets: &[(&str, &str)]) -> Config {
        Config::load(&LoadOptions {
            file: Some(file.to_path_buf()),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            overrides: sets
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: Some(cwd.to_path_buf()),
        })
        .unwrap()
    }

    #[test]
    fn file_paths_resolve_against_the_files_folder_and_others_against_the_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(project.join("scripts")).unwrap();
        std::fs::create_dir_all(project.join("data")).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(project.join("train.py"), "").unwrap();
        let file = project.join("lavender.yaml");
        std::fs::write(
            &file,
            "data_root: ./data\n\
             data:\n  sources:\n    - path: corpus/\n    - {path: dumps/*.jsonl, format: jsonl}\n    - {path: /abs/corpus}\n    - {embedded: tinyshakespeare}\n  sft_jsonl: sft.jsonl\n\
             model: {init_from: ../models/gpt2}\n\
             worker:\n  command: [python, train.py, --flag, missing.py, scripts/../train.py, data]\n\
             notify: {bark: {env_file: my.bark.env}}\n",
        )
        .unwrap();
        let c = load(
            &file,
            &elsewhere,
            &[("LAVENDER__DATA__DPO_JSONL", "dpo.jsonl")],
            &[],
        );
        assert_eq!(c.data_root, Some(project.join("data")));
        let paths: Vec<String> = c
            .data
            .sources
            .iter()
            .map(|s| serde_json::to_value(s).unwrap().to_string())
            .collect();
        assert!(paths[0].contains(&format!("{}", project.join("corpus").display())));
        assert!(
            paths[1].contains(&format!("{}", project.join("dumps/*.jsonl").display())),
            "{paths:?}"
        );
        assert!(paths[2].contains("\"/abs/corpus\""), "{paths:?}");
        assert!(paths[3].contains("tinyshakespeare"), "{paths:?}");
        assert_eq!(c.data.sft_jsonl, Some(project.join("sft.jsonl")));
        // The environment's value is the working directory's.
        assert_eq!(c.data.dpo_jsonl, Some(elsewhere.join("dpo.jsonl")));
        assert_eq!(c.model.init_from, Some(project.join("../models/gpt2")));
        assert_eq!(c.notify.bark.env_file, Some(project.join("my.bark.env")));
        // A bare program stays for PATH; an existing file argument is rebased; a flag
        // and a name of nothing are passed as written; a program with a `/` is rebased.
        assert_eq!(
            c.worker.command,
            [
                "python".to_string(),
                project.join("train.py").display().to_string(),
                "--flag".into(),
                "missing.py".into(),
                project.join("scripts/../train.py").display().to_string(),
                "data".into(),
            ]
        );
        // An override is the working directory's too.
        let c = load(&file, &elsewhere, &[], &[("model.init_from", "m")]);
        assert_eq!(c.model.init_from, Some(elsewhere.join("m")));
        // A program with a slash from the file.
        std::fs::write(&file, "worker: {command: [bin/worker, --x]}\n").unwrap();
        let c = load(&file, &elsewhere, &[], &[]);
        assert_eq!(
            c.worker.command,
            [
                project.join("bin/worker").display().to_string(),
                "--x".into()
            ]
        );
    }

    #[test]
    fn missing_paths_are_named_by_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("corpus")).unwrap();
        let file = dir.path().join("lavender.yaml");
        std::fs::write(
            &file,
            "data:\n  sources:\n    - path: corpus\n    - path: gone\n    - {path: corpus/*.txt}\n    - {path: nope/*.txt}\n\
             model: {init_from: models/gpt2}\nworker: {command: [bin/w]}\n",
        )
        .unwrap();
        let c = load(&file, dir.path(), &[], &[]);
        let missing: Vec<(String, PathBuf)> = missing_paths(&c)
            .into_iter()
            .map(|m| (m.key, m.path))
            .collect();
        assert_eq!(
            missing,
            [
                ("data.sources[1].path".to_string(), dir.path().join("gone")),
                ("data.sources[3].path".to_string(), dir.path().join("nope")),
                (
                    "model.init_from".to_string(),
                    dir.path().join("models/gpt2")
                ),
                ("worker.command[0]".to_string(), dir.path().join("bin/w")),
            ]
        );
    }

    /// The resolved config, written out and loaded from another folder, names the same
    /// files: `state/pipeline-config.yaml` holds absolute paths.
    #[test]
    fn a_resolved_config_loads_the_same_from_anywhere() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lavender.yaml");
        std::fs::write(&file, "data: {sources: [{path: corpus}]}\n").unwrap();
        let c = load(&file, dir.path(), &[], &[]);
        let state = dir.path().join("data/state");
        std::fs::create_dir_all(&state).unwrap();
        let copy = state.join("pipeline-config.yaml");
        std::fs::write(&copy, c.to_yaml()).unwrap();
        assert_eq!(load(&copy, &state, &[], &[]), c);
        // The built-in default program is left for PATH.
        assert_eq!(c.worker.command, ["lavender-worker"]);
    }
}
