//! The helper's process (`helper.py`, with the Python that has bergson): found,
//! run offline in the work directory, its progress lines drawn as they come, its
//! exit code turned into an error that says what to do.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Result, bail};

use super::INSTALL_HINT;
use super::progress::{Event, View};

/// `--python`, else the project's `.venv/bin/python` (from the current directory),
/// else `python3`.
pub(crate) fn python(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        if !p.exists() {
            bail!("--python {}: no such file; {INSTALL_HINT}", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let venv = Path::new(".venv/bin/python");
    if venv.exists() {
        return Ok(std::path::absolute(venv)?);
    }
    Ok(PathBuf::from("python3"))
}

/// No downloads: every model and file SOURCE reads here is local. torch's OpenMP
/// threads spin briefly ([`lavender::openmp`]): bergson's passes run beside training
/// or other work, where libgomp's default spin costs as much CPU as it saves.
fn helper_env(work: &Path) -> Vec<(&'static str, std::ffi::OsString)> {
    let mut env = vec![
        ("HF_HUB_OFFLINE", "1".into()),
        ("TRANSFORMERS_OFFLINE", "1".into()),
        ("HF_DATASETS_OFFLINE", "1".into()),
        ("HF_DATASETS_CACHE", work.join("datasets-cache").into()),
        ("WANDB_MODE", "disabled".into()),
        ("TOKENIZERS_PARALLELISM", "false".into()),
    ];
    env.extend(lavender::openmp::short_spin().map(|(var, value)| (var, value.into())));
    env
}

/// Runs the helper, drawing its `progress` lines on `view`; its message (or the
/// end of bergson's `log`) as the error if it fails.
pub(crate) fn helper_call(
    python: &Path,
    helper: &Path,
    work: &Path,
    log: &Path,
    args: &[&std::ffi::OsStr],
    view: &mut View,
) -> Result<()> {
    let mut child = Command::new(python)
        .arg(helper)
        .args(args)
        .current_dir(work)
        .envs(helper_env(work))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "could not run {} ({e}); bergson needs a Python: {INSTALL_HINT}",
                python.display()
            )
        })?;
    let mut said = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            match line
                .strip_prefix("progress ")
                .and_then(|p| serde_json::from_str::<Event>(p).ok())
            {
                Some(e) => view.event(&e),
                None => said.push(line),
            }
        }
    }
    let status = child.wait()?;
    view.finish();
    let said = said.join("\n");
    let said = said.trim();
    match status.code() {
        Some(0) => Ok(()),
        Some(3) => bail!(
            "bergson is not installed for {} ({said}); {INSTALL_HINT}",
            python.display(),
        ),
        Some(4) => bail!(
            "{said}; shorten it, or attribute with a model trained with a longer model.n_positions"
        ),
        Some(5) => bail!(
            "bergson failed; the end of {}:\n{}",
            log.display(),
            tail(log, 15)
        ),
        Some(6) => bail!("{said}"),
        _ => bail!(
            "{} {} failed ({status}): {said}; the end of {}:\n{}",
            python.display(),
            helper.display(),
            log.display(),
            tail(log, 15)
        ),
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helper_runs_offline_with_the_short_openmp_spin_unless_the_user_chose() {
        let env = helper_env(Path::new("/work"));
        let get = |var: &str| env.iter().find(|(k, _)| *k == var).map(|(_, v)| v.clone());
        assert_eq!(get("HF_HUB_OFFLINE"), Some("1".into()));
        assert_eq!(
            get("GOMP_SPINCOUNT"),
            lavender::openmp::short_spin().map(|(_, value)| value.into())
        );
    }
}
