//! What every data step shares: the freshness check that skips a step whose inputs and
//! config have not changed, the commit order (manifest removed → outputs swapped in →
//! manifest written), upstream lookups, and milestone events.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::documents::hex;
use super::manifest::{self, InputFingerprint, StepManifest};
use super::settings::Settings;
use super::stage;
use lavender::atomic::StagedDir;
use lavender::events::{self, Event};

pub struct Ctx {
    pub settings: Settings,
    pub root: PathBuf,
}

impl Ctx {
    pub fn new(settings: Settings) -> Result<Ctx> {
        let root = settings.data_root.clone();
        std::fs::create_dir_all(&root)
            .with_context(|| format!("could not create the data root {}", root.display()))?;
        if let Some(run_dir) = &settings.run_dir {
            std::fs::create_dir_all(run_dir).with_context(|| {
                format!("could not create the run directory {}", run_dir.display())
            })?;
        }
        Ok(Ctx { settings, root })
    }

    /// Print the milestone and append it to the run's events.jsonl when there is a run.
    pub fn event(&self, event: Event) -> Result<()> {
        eprintln!("{}", event.message);
        if let Some(run_dir) = &self.settings.run_dir {
            events::append(run_dir, &event)?;
        }
        Ok(())
    }

    pub fn force(&self) -> bool {
        self.settings.force
    }
}

/// The identity of a step's run: its format version and the config slice it reads.
pub fn config_hash(step: &str, version: u32, slice: &Value) -> String {
    let mut h = Sha256::new();
    h.update(format!("{step}\n{version}\n").as_bytes());
    // serde_json maps are ordered by key, so equal configs hash equally.
    h.update(serde_json::to_vec(slice).expect("JSON values serialize"));
    hex(&h.finalize())
}

/// The previous manifest when it shows the step already ran on these inputs with this
/// config (and `--force` was not given): the caller then skips the step.
pub fn fresh_manifest(
    ctx: &Ctx,
    step: &str,
    config_hash: &str,
    inputs: &[InputFingerprint],
) -> Result<Option<StepManifest>> {
    if ctx.force() {
        return Ok(None);
    }
    // A damaged manifest is not fatal here: the step reruns and rewrites it.
    let Ok(Some(m)) = manifest::read(&ctx.root, step) else {
        return Ok(None);
    };
    let dir = manifest::step_dir(&ctx.root, step);
    let outputs_present = m.outputs.iter().all(|o| dir.join(o).exists());
    Ok((m.is_fresh(inputs, config_hash) && outputs_present).then_some(m))
}

pub fn say_skipped(step: &str, m: &StepManifest) {
    let counts: Vec<String> = m.counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    eprintln!(
        "{step}: up to date (inputs and config unchanged since {}; {}), skipped; --force reruns it",
        m.finished_at,
        counts.join(", ")
    );
}

/// Publish a step's outputs: drop the old manifest, swap the staged directory in, write
/// the new manifest last.
pub fn commit(ctx: &Ctx, staged: StagedDir, mut m: StepManifest) -> Result<()> {
    let dir = manifest::step_dir(&ctx.root, &m.step);
    let unchanged = stage::keep_unchanged_mtimes(&staged, &dir, &m.outputs)?;
    if unchanged > 0 {
        eprintln!(
            "{}: {unchanged} of {} outputs unchanged; the steps after it will see them as before",
            m.step,
            m.outputs.len()
        );
    }
    stage::remove_if_exists(&manifest::manifest_path(&ctx.root, &m.step))?;
    staged.commit()?;
    m.finished_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    Ok(manifest::write(&ctx.root, &m)?)
}

pub fn new_manifest(
    step: &str,
    version: u32,
    config_hash: String,
    inputs: Vec<InputFingerprint>,
) -> StepManifest {
    StepManifest {
        step: step.to_string(),
        version,
        config_hash,
        inputs,
        counts: Default::default(),
        outputs: Vec::new(),
        finished_at: String::new(),
        extra: Default::default(),
    }
}

/// The manifest of the step this one reads from, or an error saying to run it.
pub fn upstream(ctx: &Ctx, step: &str, needed_by: &str) -> Result<StepManifest> {
    let read = manifest::read(&ctx.root, step).map_err(|e| {
        let damaged = matches!(
            e,
            lavender::error::Error::Empty { .. } | lavender::error::Error::Malformed { .. }
        );
        let e = anyhow::Error::from(e);
        if !damaged {
            return e;
        }
        e.context(format!(
            "{needed_by} needs the output of {step}, whose manifest is damaged: rerun `lavender-worker {step} --force`"
        ))
    })?;
    match read {
        Some(m) => Ok(m),
        None => bail!(
            "{needed_by} needs the output of {step}, but {} does not exist: run `lavender-worker {step}` first",
            manifest::manifest_path(&ctx.root, step).display()
        ),
    }
}

/// Paths and fingerprints of a finished step's outputs (the inputs of the next one).
pub fn upstream_outputs(ctx: &Ctx, m: &StepManifest) -> Result<Vec<(PathBuf, InputFingerprint)>> {
    let dir = manifest::step_dir(&ctx.root, &m.step);
    m.outputs
        .iter()
        .map(|o| {
            let p = dir.join(o);
            let fp = manifest::fingerprint(&p).with_context(|| {
                format!(
                    "{} lists {o}, which is missing; rerun `lavender-worker {} --force`",
                    manifest::manifest_path(&ctx.root, &m.step).display(),
                    m.step
                )
            })?;
            Ok((p, fp))
        })
        .collect()
}

pub fn total_size(paths: &[(PathBuf, InputFingerprint)]) -> u64 {
    paths.iter().map(|(_, f)| f.size).sum()
}

/// Visible entries of `dir`, sorted (lock files and staging directories are hidden).
#[cfg(test)]
pub fn tests_listing(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}
