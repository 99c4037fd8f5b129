//! Where each value of a loaded config came from, kept beyond the load: lavenderd
//! writes them beside its copy of the config (`state/pipeline-config.origins.json`)
//! and names that file to the worker ([`ORIGINS_VAR`]), so that an error the worker
//! raises about a value of the copy names the key and the operator's file and line
//! (or the environment variable or flag) that set it, not the copy.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, Origin};
use super::tree::{self, Node, Segment, Value};

/// The worker's environment variable naming the origins of its `--config` (a file
/// [`ConfigOrigins::to_json`] wrote).
pub const ORIGINS_VAR: &str = "LAVENDER_CONFIG_ORIGINS";

/// Where each value of a loaded config came from (its file and line, the environment
/// variable, the override or the flag that set it), by key path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigOrigins(BTreeMap<String, Origin>);

impl ConfigOrigins {
    /// Every key of the merged tree (mappings and lists too, so that a key path below
    /// one that is not there finds its nearest parent).
    pub(crate) fn of_tree(root: &Node) -> ConfigOrigins {
        let mut out = BTreeMap::new();
        flatten(root, &mut Vec::new(), &mut out);
        ConfigOrigins(out)
    }

    /// The origin of the value at a key path (`data.sources[0].path`, also
    /// `training.stages.1.lr`); the nearest existing parent's for a path that does
    /// not exist; `None` when not even its first key is a config key (`WORLD_SIZE`).
    pub fn of(&self, key: &str) -> Option<Origin> {
        let segments = canonical(key)?;
        (1..=segments.len())
            .rev()
            .find_map(|n| self.0.get(&tree::render_key_path(&segments[..n])))
            .cloned()
    }

    /// Records that `key` was set by `origin` (a start's `--scale` over the file's
    /// `scale`).
    pub fn set(&mut self, key: &str, origin: Origin) {
        if let Some(segments) = canonical(key) {
            self.0.insert(tree::render_key_path(&segments), origin);
        }
    }

    /// `error` located at the origin of its key, when this knows the key: an error
    /// found in a copy of the config then names where the operator set the value.
    pub fn relocate(&self, mut error: ConfigError) -> ConfigError {
        if let Some(origin) = error.path().and_then(|key| self.of(key)) {
            error.origin = Some(origin);
        }
        error
    }

    /// The origins as JSON: key path → `{"file": {"name", "line", "column"}}`,
    /// `{"env": NAME}`, `{"override": KEY}` or `{"flag": "lavenderd start --scale tiny"}`.
    pub fn to_json(&self) -> String {
        let stored: BTreeMap<&str, Stored> = self
            .0
            .iter()
            .map(|(k, o)| (k.as_str(), Stored::from(o)))
            .collect();
        serde_json::to_string_pretty(&stored).expect("strings and numbers serialize")
    }

    /// Reads what [`ConfigOrigins::to_json`] wrote.
    pub fn from_json(text: &str) -> Result<ConfigOrigins, serde_json::Error> {
        let stored: BTreeMap<String, Stored> = serde_json::from_str(text)?;
        // One name shared by the keys of a file, as when it was read.
        let mut names: BTreeMap<String, Arc<str>> = BTreeMap::new();
        let origins = stored
            .into_iter()
            .map(|(key, s)| {
                let origin = match s {
                    Stored::File { name, line, column } => Origin::File {
                        name: names
                            .entry(name)
                            .or_insert_with_key(|n| Arc::from(n.as_str()))
                            .clone(),
                        line,
                        column,
                    },
                    Stored::Env(var) => Origin::Env(var),
                    Stored::Override(key) => Origin::Override(key),
                    Stored::Flag(flag) => Origin::Flag(flag),
                };
                (key, origin)
            })
            .collect();
        Ok(ConfigOrigins(origins))
    }
}

/// The segments of a key path, a number between dots taken as a list index (no
/// config key is a number): `training.stages.1.lr` is `training.stages[1].lr`.
fn canonical(key: &str) -> Option<Vec<Segment>> {
    let segments = tree::parse_key_path(key)?;
    Some(
        segments
            .into_iter()
            .map(|s| match s {
                Segment::Key(k) => k.parse().map_or(Segment::Key(k), Segment::Index),
                index => index,
            })
            .collect(),
    )
}

fn flatten(node: &Node, path: &mut Vec<Segment>, out: &mut BTreeMap<String, Origin>) {
    out.insert(tree::render_key_path(path), node.origin.clone());
    match &node.value {
        Value::Map(entries) => {
            for e in entries {
                path.push(Segment::Key(e.key.clone()));
                flatten(&e.value, path, out);
                path.pop();
            }
        }
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Segment::Index(i));
                flatten(item, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// An [`Origin`] as JSON.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Stored {
    File {
        name: String,
        line: u32,
        column: u32,
    },
    Env(String),
    Override(String),
    Flag(String),
}

impl From<&Origin> for Stored {
    fn from(o: &Origin) -> Stored {
        match o {
            Origin::File { name, line, column } => Stored::File {
                name: name.to_string(),
                line: *line,
                column: *column,
            },
            Origin::Env(var) => Stored::Env(var.clone()),
            Origin::Override(key) => Stored::Override(key.clone()),
            Origin::Flag(flag) => Stored::Flag(flag.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, LoadOptions};
    use super::*;

    #[test]
    fn origins_survive_the_json_and_relocate_an_error_found_in_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lavender.yaml");
        std::fs::write(
            &file,
            "scale: small\ntraining:\n  stages:\n    - {name: pretrain, lr: 3.0e-3}\n    - {name: warmup, lr: 1.0e-3}\n",
        )
        .unwrap();
        let opts = LoadOptions {
            file: Some(file.clone()),
            env: vec![("LAVENDER_SEED".into(), "7".into())],
            ..LoadOptions::default()
        };
        let (_, mut origins) = Config::load_located(&opts).unwrap();
        origins.set("scale", Origin::Flag("lavenderd start --scale tiny".into()));
        let read = ConfigOrigins::from_json(&origins.to_json()).unwrap();
        assert_eq!(read, origins);

        let shown = file.display();
        let at = |key: &str| read.of(key).map(|o| o.to_string());
        let line5 = format!("{shown}:5:");
        assert!(at("training.stages[1].name").unwrap().starts_with(&line5));
        // Also the dotted index form, and a key below a value: its nearest parent.
        assert_eq!(at("training.stages.1.name"), at("training.stages[1].name"));
        assert_eq!(
            at("training.stages[1].name.x"),
            at("training.stages[1].name")
        );
        assert_eq!(at("seed").unwrap(), "environment variable LAVENDER_SEED");
        assert_eq!(at("scale").unwrap(), "`lavenderd start --scale tiny`");
        assert!(
            at("training.seq_len")
                .unwrap()
                .starts_with("configs/default.yaml:")
                && at("training.seq_len")
                    .unwrap()
                    .contains("a built-in default"),
            "{:?}",
            at("training.seq_len")
        );
        assert_eq!(at("WORLD_SIZE"), None);

        // An error about a key of the copy names the operator's file and line.
        let copy =
            Config::from_yaml_str("chunk: 9\n", "/data/state/pipeline-config.yaml").unwrap_err();
        assert!(copy.to_string().contains("pipeline-config.yaml"), "{copy}");
        let moved = read.relocate(copy).to_string();
        assert!(moved.starts_with("configs/default.yaml:"), "{moved}");
        let e = read.relocate(ConfigError::invalid(
            "training.stages[1].name",
            "the trainer runs stages named pretrain, sft and dpo",
        ));
        let said = e.to_string();
        assert!(
            said.starts_with(&line5)
                && said.ends_with(
                    ": training.stages[1].name: the trainer runs stages named pretrain, sft and dpo"
                ),
            "{said}"
        );
        // A key it does not know keeps the error as it was.
        let e = read.relocate(ConfigError::invalid("WORLD_SIZE", "start it alone"));
        assert_eq!(e.to_string(), "WORLD_SIZE: start it alone");
    }
}
