//! The config a start runs with, read from its file by the daemon each time (as
//! systemd never runs a unit file it has not read): the file the start names
//! (`start --config`), else the one the daemon runs with. Before anything is launched,
//! the paths the config names are checked on disk, each error naming the key, the
//! file and line that set it and the resolved path, so that the worker is never the
//! first to find a missing file (it would name `state/pipeline-config.yaml`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use lavender::config::{Config, ConfigOrigins, LoadOptions};
use lavender_api::{ConfigFileRef, sha256_hex};

use crate::locate;

/// Where the daemon's config comes from: its file (absolute) and the environment it
/// is layered with (the `LAVENDER_*` variables, the working directory and `PATH` of
/// the daemon, captured once when it starts).
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    pub file: Option<PathBuf>,
    pub opts: LoadOptions,
    /// `PATH`, where a bare `worker.command` program is looked up.
    pub path_var: Option<OsString>,
    /// The folder of lavenderd's executable (where a bare `lavender-worker` is also
    /// looked for).
    pub exe_dir: Option<PathBuf>,
}

/// A config read from its file.
pub struct LoadedConfig {
    pub config: Config,
    pub origins: ConfigOrigins,
    pub file: ConfigFileRef,
}

impl ConfigSource {
    /// The daemon's process environment, with `file`.
    pub fn from_process(file: Option<PathBuf>) -> ConfigSource {
        ConfigSource {
            file,
            opts: LoadOptions::from_process_env(),
            path_var: std::env::var_os("PATH"),
            exe_dir: std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(Path::to_path_buf)),
        }
    }

    /// Reads the config a start asks for: `requested` (which must still hold the
    /// content the operator's command read), else the daemon's own file. `None` when
    /// there is no file at all (the built-in defaults and the environment).
    pub fn read(&self, requested: Option<&ConfigFileRef>) -> Result<Option<LoadedConfig>, String> {
        let Some(path) = requested.map(|r| r.path.clone()).or(self.file.clone()) else {
            return Ok(None);
        };
        let bytes = std::fs::read(&path)
            .map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
        let sha256 = sha256_hex(&bytes);
        if let Some(r) = requested
            && r.sha256 != sha256
        {
            return Err(format!(
                "the config file {} changed while the start was sent; run the command again",
                path.display()
            ));
        }
        let opts = LoadOptions {
            file: Some(path.clone()),
            ..self.opts.clone()
        };
        let (config, origins) = Config::load_located(&opts).map_err(|e| e.to_string())?;
        Ok(Some(LoadedConfig {
            config,
            origins,
            file: ConfigFileRef { path, sha256 },
        }))
    }

    /// Where each value of the config without a file came from (the built-in
    /// defaults and the environment), for the worker's errors.
    pub fn origins_without_file(&self) -> Option<ConfigOrigins> {
        Config::load_located(&self.opts)
            .ok()
            .map(|(_, origins)| origins)
    }

    /// One line per path the config names that is not there (see
    /// [`lavender::config::missing_paths`]), plus a bare `worker.command` program found
    /// nowhere on `PATH` (nor, for `lavender-worker`, beside lavenderd); not under
    /// `launch.backend: slurm`, where the program is looked up on the compute node.
    pub fn missing(&self, config: &Config, origins: Option<&ConfigOrigins>) -> Vec<String> {
        let at = |key: &str| {
            origins
                .and_then(|o| o.of(key))
                .map(|o| format!("{o}: "))
                .unwrap_or_default()
        };
        let mut lines: Vec<String> = lavender::config::missing_paths(config)
            .into_iter()
            .map(|m| {
                format!(
                    "{}{}: {} does not exist; create it or correct the path (a relative path is taken from the folder of the file that names it)",
                    at(&m.key),
                    m.key,
                    m.path.display()
                )
            })
            .collect();
        let local = config.launch.backend == lavender::config::LaunchBackend::Local;
        if let Some(program) = config.worker.command.first().filter(|p| !p.contains('/'))
            && local
        {
            let found = if program == locate::DEFAULT_WORKER {
                locate::worker_program(program, self.path_var.as_deref(), self.exe_dir.as_deref())
                    .map_err(|e| e.to_string())
            } else {
                on_path(program, self.path_var.as_deref())
                    .map(|_| program.clone())
                    .ok_or_else(|| {
                        format!(
                            "worker.command[0]: the program `{program}` is not on PATH; install it, or give its path"
                        )
                    })
            };
            if let Err(e) = found {
                lines.push(format!("{}{e}", at("worker.command[0]")));
            }
        }
        lines
    }
}

fn on_path(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// `config: FILE (changed since the last start: a, b)`, what a start says about the
/// config it runs with against the one the previous start ran with (`before`).
pub fn start_notice(file: Option<&Path>, before: Option<&Config>, now: &Config) -> String {
    let name = file.map_or_else(
        || "the built-in defaults and the environment".to_string(),
        |f| f.display().to_string(),
    );
    let how = match before {
        None => "no previous start".to_string(),
        Some(before) => {
            let keys = lavender::config::changed_keys(before, now);
            if keys.is_empty() {
                "unchanged since the last start".to_string()
            } else {
                format!("changed since the last start: {}", keys.join(", "))
            }
        }
    };
    format!("config: {name} ({how})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_read_again_must_be_what_the_operator_read_and_missing_paths_name_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lavender.yaml");
        let text =
            "data:\n  sources:\n    - path: corpus\nworker: {command: [no-such-program-here]}\n";
        std::fs::write(&file, text).unwrap();
        let source = ConfigSource {
            path_var: Some(dir.path().as_os_str().to_owned()),
            ..ConfigSource::default()
        };
        let good = ConfigFileRef {
            path: file.clone(),
            sha256: sha256_hex(text.as_bytes()),
        };
        let loaded = source.read(Some(&good)).unwrap().unwrap();
        assert_eq!(loaded.file, good);
        let missing = source.missing(&loaded.config, Some(&loaded.origins));
        assert_eq!(missing.len(), 2, "{missing:?}");
        assert!(
            missing[0].starts_with(&format!("{}:3:", file.display()))
                && missing[0].contains(&format!(
                    "data.sources[0].path: {} does not exist",
                    dir.path().join("corpus").display()
                )),
            "{}",
            missing[0]
        );
        assert!(
            missing[1].starts_with(&format!("{}:4:", file.display()))
                && missing[1].contains("`no-such-program-here` is not on PATH"),
            "{}",
            missing[1]
        );
        let stale = ConfigFileRef {
            sha256: "0".repeat(64),
            ..good
        };
        assert!(source.read(Some(&stale)).err().unwrap().contains("changed"));
        assert!(ConfigSource::default().read(None).unwrap().is_none());
    }

    #[test]
    fn the_start_notice_names_the_changed_keys() {
        let a = Config::default();
        let mut b = a.clone();
        b.data.filter.min_chars += 1;
        let f = Path::new("/p/lavender.yaml");
        assert_eq!(
            start_notice(Some(f), Some(&a), &b),
            "config: /p/lavender.yaml (changed since the last start: data.filter.min_chars)"
        );
        assert_eq!(
            start_notice(Some(f), Some(&a), &a),
            "config: /p/lavender.yaml (unchanged since the last start)"
        );
        assert!(start_notice(None, None, &a).ends_with("(no previous start)"));
    }
}
