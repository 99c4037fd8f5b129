//! Which folder is the data root, and how it was chosen; first that applies:
//!
//! 1. `--data-root` (the command line),
//! 2. `LAVENDER_DATA_ROOT`,
//! 3. the config's `data_root`,
//! 4. `data_root_candidates`: the first that holds a data root, else the first that
//!    exists (a new disk's first start),
//! 5. a `data-root/` folder in the current folder or the nearest one above it (as git
//!    finds `.git`): a data root kept beside a project,
//! 6. the per-user data folder: `$XDG_DATA_HOME/lavender`, else
//!    `~/Library/Application Support/lavender` on macOS, `~/.local/share/lavender`
//!    elsewhere — the same folder from every folder, so `make run` and every later
//!    command, wherever it is typed, meet there without anyone naming it.
//!
//! The environment and the current folder are passed in ([`Sources`]), so callers and
//! tests decide what they are; the folders themselves are looked at (whether a
//! candidate exists, whether a folder holds a data root).

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The data root variable; read here, not layered with the config.
pub const DATA_ROOT_VAR: &str = "LAVENDER_DATA_ROOT";

/// The folder that makes a data root beside a project (step 5).
pub const FOLDER_NAME: &str = "data-root";

/// The per-user data folder's own name.
const APP_FOLDER: &str = "lavender";

/// The environment the resolution reads, passed in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataRootEnv {
    /// `LAVENDER_DATA_ROOT`, when set and not empty.
    pub data_root: Option<PathBuf>,
    /// `XDG_DATA_HOME`, when set to an absolute path (the XDG spec ignores others).
    pub xdg_data_home: Option<PathBuf>,
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// Whether the per-user folder is macOS's (`~/Library/Application Support`).
    pub macos: bool,
}

impl DataRootEnv {
    /// This process's environment.
    pub fn from_process() -> DataRootEnv {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        DataRootEnv {
            data_root: var(DATA_ROOT_VAR),
            xdg_data_home: var("XDG_DATA_HOME").filter(|p| p.is_absolute()),
            home: var("HOME"),
            macos: cfg!(target_os = "macos"),
        }
    }

    /// The per-user data folder and how it is written in messages; `None` without a
    /// home folder to put it in.
    pub fn user_root(&self) -> Option<(PathBuf, &'static str)> {
        if let Some(xdg) = &self.xdg_data_home {
            return Some((xdg.join(APP_FOLDER), "$XDG_DATA_HOME/lavender"));
        }
        let home = self.home.as_ref()?;
        Some(if self.macos {
            (
                home.join("Library/Application Support").join(APP_FOLDER),
                "~/Library/Application Support/lavender",
            )
        } else {
            (
                home.join(".local/share").join(APP_FOLDER),
                "~/.local/share/lavender",
            )
        })
    }
}

/// What the resolution looks at.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// `--data-root`.
    pub flag: Option<&'a Path>,
    /// The config's `data_root`.
    pub config: Option<&'a Path>,
    /// The config's `data_root_candidates`.
    pub candidates: &'a [PathBuf],
    /// The current folder; relative paths are taken from here.
    pub cwd: &'a Path,
    pub env: &'a DataRootEnv,
}

/// How the data root was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    Flag,
    Env,
    Config,
    /// `data_root_candidates[index]`; `holds` whether it holds a data root (else it
    /// was the first that exists); `skipped`, the candidates before it that do not
    /// exist (an unplugged disk is named, never passed over in silence).
    Candidate {
        index: usize,
        holds: bool,
        skipped: Vec<PathBuf>,
    },
    /// A `data-root/` folder in the current folder (`here`) or one above it.
    Found {
        here: bool,
    },
    /// The per-user data folder (`folder` as messages write it), or without a home
    /// folder (`None`) `./data-root`.
    Default {
        folder: Option<&'static str>,
    },
}

impl Choice {
    /// The choice's name in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Choice::Flag => "flag",
            Choice::Env => "env",
            Choice::Config => "config",
            Choice::Candidate { .. } => "candidate",
            Choice::Found { .. } => "found",
            Choice::Default { .. } => "default",
        }
    }

    /// How it was chosen, in words.
    pub fn describe(&self) -> String {
        match self {
            Choice::Flag => "--data-root".into(),
            Choice::Env => DATA_ROOT_VAR.into(),
            Choice::Config => "the config's data_root".into(),
            Choice::Candidate {
                index,
                holds,
                skipped,
            } => {
                let which = if *holds {
                    "the first that holds a data root"
                } else {
                    "the first that exists; none holds a data root yet"
                };
                let mut text = format!("data_root_candidates[{index}], {which}");
                if !skipped.is_empty() {
                    let names: Vec<String> =
                        skipped.iter().map(|p| p.display().to_string()).collect();
                    text.push_str(&format!("; not there: {}", names.join(", ")));
                }
                text
            }
            Choice::Found { here: true } => format!("the {FOLDER_NAME}/ folder here"),
            Choice::Found { here: false } => {
                format!("the {FOLDER_NAME}/ folder found above the current folder")
            }
            Choice::Default {
                folder: Some(folder),
            } => format!(
                "the per-user default {folder}: no --data-root, {DATA_ROOT_VAR}, config data_root or candidate, no {FOLDER_NAME}/ folder here or above"
            ),
            Choice::Default { folder: None } => {
                format!("no HOME for the per-user default: ./{FOLDER_NAME}")
            }
        }
    }
}

/// The data root a command reads, how it was chosen, and, when it holds nothing, the
/// places it would have looked at otherwise that do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub path: PathBuf,
    pub choice: Choice,
    /// Only when `path` holds no data root: other places that do, in the order the
    /// resolution ranks them.
    pub elsewhere: Vec<(PathBuf, Choice)>,
}

impl Resolved {
    /// The first line of every command that reads a data root.
    pub fn line(&self) -> String {
        format!(
            "data root: {} ({})",
            self.path.display(),
            self.choice.describe()
        )
    }

    /// When this data root holds nothing but another place would: what to type.
    pub fn hint(&self) -> Option<String> {
        let (other, how) = self.elsewhere.first()?;
        let more = match self.elsewhere.len() {
            1 => String::new(),
            n => format!(" ({} more: {})", n - 1, self.others_listed()),
        };
        Some(format!(
            "nothing in {} yet, but {} ({}) holds a data root: pass --data-root {}{more}",
            self.path.display(),
            other.display(),
            how.describe(),
            other.display()
        ))
    }

    fn others_listed(&self) -> String {
        self.elsewhere[1..]
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The `data_root` field of `--json` outputs.
    pub fn to_json(&self) -> serde_json::Value {
        #[derive(Serialize)]
        struct Place<'a> {
            path: &'a Path,
            chosen_by: &'static str,
            how: String,
        }
        #[derive(Serialize)]
        struct Json<'a> {
            path: &'a Path,
            chosen_by: &'static str,
            how: String,
            elsewhere: Vec<Place<'a>>,
        }
        serde_json::to_value(Json {
            path: &self.path,
            chosen_by: self.choice.kind(),
            how: self.choice.describe(),
            elsewhere: self
                .elsewhere
                .iter()
                .map(|(path, c)| Place {
                    path,
                    chosen_by: c.kind(),
                    how: c.describe(),
                })
                .collect(),
        })
        .expect("paths and strings always serialize")
    }
}

/// Whether `dir` holds a lavender data root: a daemon's pipeline record, a run
/// directory, or a pipeline log.
pub fn holds_data_root(dir: &Path) -> bool {
    let has = |sub: &str, prefix: &str| {
        std::fs::read_dir(dir.join(sub)).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
        })
    };
    dir.join("state/pipeline.json").is_file()
        || has(super::CHECKPOINTS, crate::run::RUN_PREFIX)
        || has(super::LOGS, "pipeline_")
}

/// The data root `src` names; see the module's documentation for the order.
pub fn resolve(src: &Sources) -> Resolved {
    let (path, choice) = choose(src);
    let elsewhere = if holds_data_root(&path) {
        Vec::new()
    } else {
        places(src)
            .into_iter()
            .filter(|(p, _)| *p != path && holds_data_root(p))
            .fold(Vec::new(), |mut seen: Vec<(PathBuf, Choice)>, place| {
                if !seen.iter().any(|(p, _)| *p == place.0) {
                    seen.push(place);
                }
                seen
            })
    };
    Resolved {
        path,
        choice,
        elsewhere,
    }
}

fn choose(src: &Sources) -> (PathBuf, Choice) {
    let cwd = src.cwd;
    if let Some(p) = src.flag {
        return (cwd.join(p), Choice::Flag);
    }
    if let Some(p) = &src.env.data_root {
        return (cwd.join(p), Choice::Env);
    }
    if let Some(p) = src.config {
        return (cwd.join(p), Choice::Config);
    }
    if let Some(found) = candidate(src) {
        return found;
    }
    if let Some(found) = found_folder(cwd) {
        return found;
    }
    default_root(src)
}

/// The first candidate holding a data root, else the first that exists; the
/// candidates before it that are not there are named in the choice.
fn candidate(src: &Sources) -> Option<(PathBuf, Choice)> {
    let all: Vec<PathBuf> = src.candidates.iter().map(|c| src.cwd.join(c)).collect();
    let pick = |holds: bool, index: usize| {
        let skipped = all[..index]
            .iter()
            .filter(|p| !p.is_dir())
            .cloned()
            .collect();
        (
            all[index].clone(),
            Choice::Candidate {
                index,
                holds,
                skipped,
            },
        )
    };
    if let Some(i) = all.iter().position(|p| holds_data_root(p)) {
        return Some(pick(true, i));
    }
    all.iter().position(|p| p.is_dir()).map(|i| pick(false, i))
}

/// `data-root/` in `cwd` or the nearest folder above it.
fn found_folder(cwd: &Path) -> Option<(PathBuf, Choice)> {
    cwd.ancestors()
        .map(|dir| dir.join(FOLDER_NAME))
        .position(|p| p.is_dir())
        .map(|depth| {
            let dir = cwd
                .ancestors()
                .nth(depth)
                .expect("position() found it among the ancestors");
            (dir.join(FOLDER_NAME), Choice::Found { here: depth == 0 })
        })
}

fn default_root(src: &Sources) -> (PathBuf, Choice) {
    match src.env.user_root() {
        Some((path, folder)) => (
            path,
            Choice::Default {
                folder: Some(folder),
            },
        ),
        None => (src.cwd.join(FOLDER_NAME), Choice::Default { folder: None }),
    }
}

/// Every place the resolution would look at, in its order, whether it applies or not.
fn places(src: &Sources) -> Vec<(PathBuf, Choice)> {
    let cwd = src.cwd;
    let mut out = Vec::new();
    if let Some(p) = src.flag {
        out.push((cwd.join(p), Choice::Flag));
    }
    if let Some(p) = &src.env.data_root {
        out.push((cwd.join(p), Choice::Env));
    }
    if let Some(p) = src.config {
        out.push((cwd.join(p), Choice::Config));
    }
    for (index, c) in src.candidates.iter().enumerate() {
        out.push((
            cwd.join(c),
            Choice::Candidate {
                index,
                holds: true,
                skipped: Vec::new(),
            },
        ));
    }
    out.extend(found_folder(cwd));
    out.push(default_root(src));
    out
}
