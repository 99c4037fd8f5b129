//! The worker's data steps run as the real binary on a temporary data root, and
//! reads of what they write.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::bins::worker;

/// A fresh tempdir holding the data root (`root/`), a run directory (`run/`) and
/// the config the steps read (`config.yaml`).
pub struct Root {
    pub dir: tempfile::TempDir,
}

impl Default for Root {
    fn default() -> Root {
        Root {
            dir: tempfile::tempdir().unwrap(),
        }
    }
}

impl Root {
    pub fn new() -> Root {
        Root::default()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `lavenderd status --json` with no daemon (composed from the files, as a
    /// daemon's is), checked against the status contract.
    pub fn status(&self) -> serde_json::Value {
        let out = crate::training::run_ok(
            Command::new(crate::bins::lavenderd())
                .arg("--data-root")
                .arg(self.data())
                .args(["status", "--json"])
                .env_remove("LAVENDER_CONFIG"),
        );
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        crate::assert_valid(&status);
        status
    }

    pub fn data(&self) -> PathBuf {
        self.path().join("root")
    }

    pub fn run_dir(&self) -> PathBuf {
        let p = self.path().join("run");
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// Write `config.yaml` next to the data root and return its path.
    pub fn config(&self, yaml: &str) -> PathBuf {
        let p = self.path().join("config.yaml");
        std::fs::write(&p, yaml).unwrap();
        p
    }

    pub fn cmd(&self, step: &str, extra: &[&str]) -> Command {
        let mut c = Command::new(worker());
        c.arg(step)
            .arg("--data-root")
            .arg(self.data())
            .args(extra)
            .env_remove("LAVENDER_CONFIG")
            .env_remove("LAVENDER_DATA_ROOT")
            .env_remove("LAVENDER_RUN_DIR")
            .env_remove("LAVENDER_FORCE");
        let cfg = self.path().join("config.yaml");
        if cfg.exists() && !extra.contains(&"--config") {
            c.arg("--config").arg(cfg);
        }
        c
    }

    /// Run a step; returns its output and how long it took.
    pub fn run(&self, step: &str, extra: &[&str]) -> (Output, Duration) {
        let t = Instant::now();
        let out = self.cmd(step, extra).output().unwrap();
        (out, t.elapsed())
    }

    /// Run a step that must succeed; returns its stderr.
    pub fn ok(&self, step: &str, extra: &[&str]) -> String {
        let (out, _) = self.run(step, extra);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{step} failed:\n{err}");
        err
    }

    /// Run a step that must fail; returns its stderr.
    pub fn fails(&self, step: &str, extra: &[&str]) -> String {
        let (out, _) = self.run(step, extra);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{step} should have failed:\n{err}");
        err
    }

    pub fn manifest(&self, rel_dir: &str) -> serde_json::Value {
        let p = self.data().join(rel_dir).join("manifest.json");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        serde_json::from_str(&text).unwrap()
    }

    pub fn has_manifest(&self, rel_dir: &str) -> bool {
        self.data().join(rel_dir).join("manifest.json").exists()
    }

    pub fn count(&self, rel_dir: &str, key: &str) -> u64 {
        self.manifest(rel_dir)["counts"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("{rel_dir}/manifest.json has no count {key}"))
    }

    pub fn events(&self) -> Vec<serde_json::Value> {
        let p = self.run_dir().join("events.jsonl");
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Documents of a JSONL document file.
pub fn docs(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// A corpus config reading one local path, with extra YAML lines under `data:`.
pub fn path_config(path: &Path, data_extra: &str) -> String {
    format!(
        "data:\n  sources:\n    - path: {}\n{}",
        path.display(),
        data_extra
    )
}

/// Names of the entries of `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
