//! `lavenderd pull [RUN] [CHECKPOINT]`: one checkpoint from the replication target
//! (`replicate:`) into the data root, verified; and the restore `start --resume
//! latest` does by itself when the data root holds no complete checkpoint.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use crate::replicate::restore::{self, Restored};
use crate::replicate::{Remote, manifest::RemoteManifest};
use crate::settings::Settings;

pub(super) fn open(settings: &Settings) -> Result<Remote> {
    let env = |k: &str| std::env::var(k).ok();
    Remote::open(&settings.config.replicate, &env, &settings.layout.data_root)?.ok_or_else(|| {
        anyhow::anyhow!(
            "replicate.url is not set: there is no remote copy to pull from (docs/OPERATIONS.md, \"Replication\")"
        )
    })
}

fn say(restored: &Restored, remote: &Remote) {
    for (name, why) in &restored.skipped {
        println!("passed over {name}: {why}");
    }
    for (lineage, newest) in &restored.other_lineages {
        println!("another training's copies, not picked: lineage {lineage} (newest {newest})");
    }
    let m = &restored.manifest;
    if !restored.downloaded {
        println!(
            "{}/{}/{} is here already: {}",
            remote.target(),
            m.run,
            m.checkpoint,
            restored.path.display()
        );
        return;
    }
    println!(
        "pulled {}/{}/{} (step {}, {} files, {:.1} MB, each checked against its manifest) into {}",
        remote.target(),
        m.run,
        m.checkpoint,
        m.step,
        m.files.len(),
        m.bytes() as f64 / 1e6,
        restored.path.display()
    );
}

pub async fn run(
    settings: &Settings,
    run: Option<&str>,
    checkpoint: Option<&str>,
) -> Result<ExitCode> {
    let remote = open(settings)?;
    let root = settings.layout.checkpoints_root();
    let restored = match checkpoint {
        None => restore::newest(&remote, run, &root).await?,
        Some(ckpt) => {
            let run = run.context("name the run of the checkpoint")?;
            let m: RemoteManifest = remote.manifest(run, ckpt).await?.with_context(|| {
                format!(
                    "{}/{run}/{ckpt} is not a complete remote checkpoint (no {}); `lavenderd checkpoints --run {run}` lists those there",
                    remote.target(),
                    crate::replicate::manifest::FILE
                )
            })?;
            let (path, downloaded) = restore::pull(&remote, &m, &root).await?;
            Some(Restored {
                path,
                downloaded,
                manifest: m,
                skipped: Vec::new(),
                other_lineages: Vec::new(),
            })
        }
    };
    match restored {
        Some(r) => {
            say(&r, &remote);
            Ok(ExitCode::SUCCESS)
        }
        None => bail!(
            "{} holds no complete checkpoint{}",
            remote.target(),
            run.map(|r| format!(" of {r}")).unwrap_or_default()
        ),
    }
}

/// `start --resume latest` with replication configured and no complete checkpoint in
/// the data root (a wiped disk, a new machine): the newest remote one that downloads
/// whole is brought back first, so the daemon resumes from it.
pub async fn before_resume(settings: &Settings, resume: Option<&str>) -> Result<()> {
    if resume != Some("latest") || !settings.config.replicate.enabled() {
        return Ok(());
    }
    let root = settings.layout.checkpoints_root();
    if let Some(newest) = lavender::checkpoint::list_checkpoints(&root)
        .ok()
        .and_then(|mut l| l.pop())
    {
        return run_files_back(settings, &newest).await;
    }
    let remote = open(settings)?;
    println!(
        "no complete checkpoint in {}; looking for one in {}",
        root.display(),
        remote.target()
    );
    match restore::newest(&remote, None, &root).await? {
        Some(r) => say(&r, &remote),
        None => println!("{} holds no complete checkpoint either", remote.target()),
    }
    Ok(())
}

/// The newest local checkpoint's run folder lacks a file its resume reads that its
/// remote copy lists (a DPO reference deleted by hand, a run folder copied without
/// it): brought back, said, before the resume needs it.
async fn run_files_back(
    settings: &Settings,
    newest: &lavender::checkpoint::Checkpoint,
) -> Result<()> {
    let Some(run_dir) = newest.path.parent() else {
        return Ok(());
    };
    let run = crate::replicate::remote::dir_name(run_dir);
    let missing = |m: &RemoteManifest| {
        m.run_files
            .iter()
            .filter(|f| !run_dir.join(&f.path).exists())
            .map(|f| f.path.clone())
            .collect::<Vec<_>>()
    };
    // A target that cannot be reached, or has no copy, leaves the start as it was.
    let Ok(remote) = open(settings) else {
        return Ok(());
    };
    let Ok(Some(m)) = remote.manifest(&run, &newest.name).await else {
        return Ok(());
    };
    let lacking = missing(&m);
    if lacking.is_empty() {
        return Ok(());
    }
    restore::pull(&remote, &m, &settings.layout.checkpoints_root()).await?;
    println!(
        "{} lacked {}, which its resume reads; brought back from {}/{run}/{}",
        run_dir.display(),
        lacking.join(", "),
        remote.target(),
        newest.name
    );
    Ok(())
}

/// `lavenderd checkpoints` with `replicate.url` set: each checkpoint of the run, local,
/// remote (committed) or both. `--json` and a config without replication list the
/// local ones only (`listing::checkpoints`).
pub async fn checkpoints(settings: &Settings, run: Option<&str>, json: bool) -> Result<ExitCode> {
    if json || !settings.config.replicate.enabled() {
        return super::listing::checkpoints(settings, run, json);
    }
    let local = crate::checkpoints::inventory::checkpoints(&settings.layout, run);
    let remote = open(settings)?;
    let run_name = run
        .map(|r| crate::replicate::remote::dir_name(std::path::Path::new(r)))
        .or_else(|| {
            local
                .as_ref()
                .ok()?
                .first()
                .and_then(|c| c.path.parent().map(crate::replicate::remote::dir_name))
        });
    let mut remote_list = remote.manifests(run_name.as_deref()).await?;
    // No run named and none here: the newest remote run's.
    let run_name = match run_name {
        Some(r) => r,
        None => match remote_list.last() {
            Some(m) => m.run.clone(),
            None => return super::listing::checkpoints(settings, run, json),
        },
    };
    remote_list.retain(|m| m.run == run_name);
    let local = match local {
        Ok(l) => l,
        Err(_) if !remote_list.is_empty() => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut rows: Vec<(u64, String, String, &'static str)> = Vec::new();
    for c in &local {
        let there = remote_list.iter().any(|m| m.checkpoint == c.name);
        let place = if there { "local+remote" } else { "local" };
        rows.push((c.step, c.name.clone(), c.stage.clone(), place));
    }
    for m in &remote_list {
        if !local.iter().any(|c| c.name == m.checkpoint) {
            rows.push((m.step, m.checkpoint.clone(), m.stage.clone(), "remote"));
        }
    }
    rows.sort();
    println!("{run_name} (remote copies in {})", remote.target());
    if rows.is_empty() {
        println!("no complete checkpoints");
    }
    for (step, name, stage, place) in rows {
        println!("{name}  step {step}  stage {stage}  {place}");
    }
    Ok(ExitCode::SUCCESS)
}
